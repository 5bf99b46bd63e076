"""Dynamic position bias: parity with x-transformers, the table, KV cache, flex, gradcheck."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.bias.dynamic import DynamicPositionBias, dynamic_distance_feature
from tests.attention.test_backends import run
from tests.attention.test_flex import evaluate_score_mod

HEADS = 3


def _x_transformers():
    return pytest.importorskip("x_transformers.x_transformers")


def _randomize(dpb: DynamicPositionBias) -> DynamicPositionBias:
    """Non-default norm parameters too, so that a skipped LayerNorm affine shows."""
    with torch.no_grad():
        for layer in dpb.mlp:
            if isinstance(layer, nn.LayerNorm):
                nn.init.normal_(layer.weight)
                nn.init.normal_(layer.bias)
    return dpb


def _copy_from_x_transformers(ours: DynamicPositionBias, ref: nn.Module) -> None:
    """Copy the reference's Linear and LayerNorm parameters, in order, into ours.

    The reference's first norm is its own bias-less ``LayerNorm`` (``gamma``); the later ones
    are ``nn.LayerNorm`` (``weight``, ``bias``). Ours are all ``nn.LayerNorm``: the missing
    bias becomes zero.
    """
    ref_layers = []
    for module in ref.mlp.modules():
        affine_norm = isinstance(module, nn.LayerNorm) and module.weight is not None
        if isinstance(module, nn.Linear) or hasattr(module, "gamma") or affine_norm:
            ref_layers.append(module)
    our_layers = [m for m in ours.mlp if isinstance(m, (nn.Linear, nn.LayerNorm))]
    assert [type(m) is nn.Linear for m in ref_layers] == [type(m) is nn.Linear for m in our_layers]
    with torch.no_grad():
        for theirs, mine in zip(ref_layers, our_layers, strict=True):
            if isinstance(theirs, nn.Linear):
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)
            elif hasattr(theirs, "gamma"):
                mine.weight.copy_(theirs.gamma)
                mine.bias.zero_()
            else:
                mine.weight.copy_(theirs.weight)
                mine.bias.copy_(theirs.bias)


def _reference(depth: int, log_distance: bool, norm: bool, hidden: int = 16) -> nn.Module:
    xt = _x_transformers()
    ref = xt.DynamicPositionBias(
        dim=hidden, heads=HEADS, depth=depth, log_distance=log_distance, norm=norm
    )
    with torch.no_grad():  # non-trivial norms on both sides
        for module in ref.modules():
            if hasattr(module, "gamma"):
                nn.init.normal_(module.gamma)
            elif isinstance(module, nn.LayerNorm) and module.weight is not None:
                nn.init.normal_(module.weight)
                nn.init.normal_(module.bias)
    return ref


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("log_distance", [False, True])
@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize(("q_len", "k_len"), [(24, 24), (1, 30), (5, 17)])
def test_matches_x_transformers(
    depth: int, log_distance: bool, norm: bool, q_len: int, k_len: int
) -> None:
    ref = _reference(depth, log_distance, norm)
    ours = DynamicPositionBias(
        HEADS, hidden=16, depth=depth, log_distance=log_distance, norm=norm, max_seq_len=64
    )
    _copy_from_x_transformers(ours, ref)
    with torch.no_grad():
        want = ref(q_len, k_len)  # queries right-aligned: positions k_len − q_len … k_len − 1
        got = ours.bias(torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    assert got.shape == want.shape == (HEADS, q_len, k_len)
    assert_close(got, want)


def test_matches_x_transformers_at_every_distance_of_the_table() -> None:
    # The whole table (both signs) equals the reference's bias over max_seq_len positions.
    ref = _reference(2, True, True)
    ours = DynamicPositionBias(HEADS, hidden=16, log_distance=True, norm=True, max_seq_len=40)
    _copy_from_x_transformers(ours, ref)
    with torch.no_grad():
        want = ref(40, 40)
        table = ours.distance_table("cpu", torch.float32)  # (79, heads)
    # Row r + 39 holds distance r = i − j: the first key column has r = 0 … 39, the last
    # query row r = 39 … 0, the first query row r = 0 … −39.
    assert_close(table[39 + torch.arange(40)].T, want[:, :, 0])
    assert_close(table[78 - torch.arange(40)].T, want[:, -1, :])
    assert_close(table[39 - torch.arange(40)].T, want[:, 0, :])


def test_sign_convention_is_query_minus_key() -> None:
    dpb = DynamicPositionBias(HEADS, hidden=8, max_seq_len=10)
    with torch.no_grad():
        bias = dpb.bias(torch.tensor([6]), torch.tensor([2, 9]))  # i − j = 4 and −3
        table = dpb.distance_table("cpu", torch.float32)
    assert_close(bias[:, 0, 0], table[9 + 4], rtol=0, atol=0)
    assert_close(bias[:, 0, 1], table[9 - 3], rtol=0, atol=0)


def test_distance_feature() -> None:
    r = torch.tensor([-7.0, -1.0, 0.0, 1.0, 7.0])
    assert_close(dynamic_distance_feature(r), r)
    assert_close(dynamic_distance_feature(r, mode="symmetric"), r.abs())
    signed_log = torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0]) * torch.log(torch.tensor(2.0))
    signed_log[[0, 4]] = torch.tensor([-1.0, 1.0]) * torch.log(torch.tensor(8.0))
    assert_close(dynamic_distance_feature(r, log_distance=True), signed_log)
    assert_close(dynamic_distance_feature(r, log_distance=True, mode="symmetric"), signed_log.abs())
    with pytest.raises(ValueError, match="mode"):
        dynamic_distance_feature(r, mode="causal")  # type: ignore[arg-type]


def test_symmetric_mode_gives_past_and_future_keys_the_same_bias() -> None:
    pos = torch.arange(12)
    symmetric = DynamicPositionBias(HEADS, hidden=8, mode="symmetric", max_seq_len=12)
    bias = symmetric.bias(pos, pos)
    assert_close(bias, bias.transpose(-1, -2), rtol=0, atol=0)
    signed = DynamicPositionBias(HEADS, hidden=8, max_seq_len=12)
    signed.load_state_dict(symmetric.state_dict())
    both = signed.bias(pos, pos)
    assert not torch.allclose(both, both.transpose(-1, -2))
    causal = pos[:, None] >= pos[None, :]
    assert_close(both[:, causal], bias[:, causal], rtol=0, atol=0)  # past keys agree


@pytest.mark.parametrize("new", [1, 4])
def test_kv_cache_rows_equal_the_full_bias(new: int) -> None:
    dpb = _randomize(DynamicPositionBias(HEADS, hidden=8, norm=True, max_seq_len=32))
    full = dpb.bias(torch.arange(32), torch.arange(32))
    step = dpb.bias(torch.arange(32 - new, 32), torch.arange(32))
    assert_close(step, full[:, 32 - new :], rtol=0, atol=0)


def test_batched_positions_and_shift_invariance() -> None:
    dpb = DynamicPositionBias(HEADS, hidden=8, log_distance=True, max_seq_len=64)
    q_pos = torch.tensor([[3, 4], [40, 41]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4], [37, 38, 39, 40, 41]])
    got = dpb.bias(q_pos, k_pos)
    assert got.shape == (2, HEADS, 2, 5)
    assert_close(got[0], got[1], rtol=0, atol=0)  # same relative layout
    assert_close(got[0], dpb.bias(q_pos[0], k_pos[0]), rtol=0, atol=0)
    # Whole-valued floating positions are accepted.
    assert_close(dpb.bias(q_pos[0].double(), k_pos[0].float()), got[0], rtol=0, atol=0)


def test_gradcheck_every_parameter() -> None:
    dpb = _randomize(
        DynamicPositionBias(
            2, hidden=4, depth=2, norm=True, log_distance=True, max_seq_len=8, dtype=torch.float64
        )
    )
    q_pos, k_pos = torch.arange(3, 8), torch.arange(8)
    names = [name for name, _ in dpb.named_parameters()]
    assert len(names) == 10  # 3 Linear + 2 LayerNorm, weight and bias each
    params = tuple(p.detach().clone().requires_grad_(True) for p in dpb.parameters())

    def fn(*values: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(
            dpb, dict(zip(names, values, strict=True)), (q_pos, k_pos)
        )

    assert torch.autograd.gradcheck(fn, params)


def test_table_follows_parameter_updates_and_deepcopy_after_backward() -> None:
    dpb = DynamicPositionBias(HEADS, hidden=8, max_seq_len=16)
    pos = torch.arange(10)
    first = dpb.bias(pos, pos)
    first.sum().backward()  # frees the table's graph
    with torch.no_grad():
        dpb.mlp[-1].bias.add_(1.0)
    second = dpb.bias(pos, pos)
    assert_close(second, first.detach() + 1.0)
    second.sum().backward()  # a fresh table: no "backward through the graph a second time"
    clone = copy.deepcopy(dpb)  # the per-call tables (with graphs) are not copied
    restored = pickle.loads(pickle.dumps(dpb))
    assert clone._tables == {} and restored._tables == {}
    assert_close(clone.bias(pos, pos), second.detach(), rtol=0, atol=0)
    assert_close(restored.bias(pos, pos), second.detach(), rtol=0, atol=0)


def test_shared_across_layers_gradients_accumulate() -> None:
    # One instance serves every layer; each attention call rebuilds the table it uses.
    assert DynamicPositionBias.shared_across_layers is True
    dpb = DynamicPositionBias(HEADS, hidden=8, max_seq_len=16, dtype=torch.float64)
    q, k, v = (torch.randn(1, HEADS, 10, 4, dtype=torch.float64) for _ in range(3))
    two_layers = attend(attend(q, k, v, pos=dpb, causal=True), k, v, pos=dpb, causal=True)
    two_layers.sum().backward()
    got = [p.grad.clone() for p in dpb.parameters()]
    names = [name for name, _ in dpb.named_parameters()]

    def fn(*values: torch.Tensor) -> torch.Tensor:
        bias = torch.func.functional_call(
            dpb, dict(zip(names, values, strict=True)), (torch.arange(10),) * 2
        )
        mask = torch.ones(10, 10, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-1, -2) / 2 + bias).masked_fill(~mask, float("-inf"))
        first = scores.softmax(-1) @ v
        scores = (first @ k.transpose(-1, -2) / 2 + bias).masked_fill(~mask, float("-inf"))
        return scores.softmax(-1) @ v

    want = torch.autograd.grad(fn(*dpb.parameters()).sum(), list(dpb.parameters()))
    assert_close(got, list(want))


def test_chunked_backend_gradients_equal_sdpa() -> None:
    # The chunked backend calls prepare_bias and bias_at again under activation
    # checkpointing, in the backward pass.
    dpb = _randomize(DynamicPositionBias(HEADS, hidden=8, norm=True, dtype=torch.float64))
    q, k, v = (torch.randn(2, HEADS, 20, 8, dtype=torch.float64) for _ in range(3))
    causal = {"causal": True}
    want, want_grads = run("sdpa", dpb, q, k, v, causal, grad=True)
    got, got_grads = run(Backend("chunked", block_size=6), dpb, q, k, v, causal, grad=True)
    assert_close(got, want)
    assert len(got_grads) == len(want_grads) == 3 + len(list(dpb.parameters()))
    for g, w in zip(got_grads, want_grads, strict=True):  # q, k, v, then every parameter
        assert_close(g, w)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_score_mod_equals_materialized_bias(batched: bool, dtype: torch.dtype) -> None:
    dpb = _randomize(DynamicPositionBias(HEADS, hidden=8, norm=True, log_distance=True))
    hooks = hooks_of(dpb)
    q_pos = torch.tensor([[3, 4, 9], [0, 50, 300]]) if batched else torch.tensor([7, 8, 200])
    k_pos = (
        torch.tensor([[0, 1, 2, 3, 4, 9, 12], [0, 1, 50, 51, 200, 300, 299]])
        if batched
        else torch.arange(200, 207)
    )
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, q_pos, k_pos)
    got = evaluate_score_mod(score_mod, 2, HEADS, 3, 7, dtype)
    want = hooks.materialized_bias(q_pos, k_pos, dtype)
    assert_close(got, want.expand(2, HEADS, 3, 7), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_compiled_flex_equals_sdpa() -> None:
    torch._dynamo.reset()
    dpb = _randomize(DynamicPositionBias(HEADS, hidden=8, norm=True, max_seq_len=256))
    q, k, v = (torch.randn(2, HEADS, 256, 16) for _ in range(3))
    with torch.no_grad():
        got = attend(q, k, v, pos=dpb, causal=True, backend=Backend("flex"))
        want = attend(q, k, v, pos=dpb, causal=True, backend="sdpa")
        # A changed parameter reaches the next call (the table is rebuilt, not recompiled).
        dpb.mlp[0].weight.mul_(-3.0)
        changed = attend(q, k, v, pos=dpb, causal=True, backend=Backend("flex"))
        want_changed = attend(q, k, v, pos=dpb, causal=True, backend="sdpa")
    assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert_close(changed, want_changed, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(changed, got, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2.0}, "num_heads"),
        ({"num_heads": 2, "hidden": 0}, "hidden"),
        ({"num_heads": 2, "hidden": True}, "hidden"),
        ({"num_heads": 2, "depth": 0}, "depth"),
        ({"num_heads": 2, "max_seq_len": 0}, "max_seq_len"),
        ({"num_heads": 2, "mode": "causal"}, "mode"),
        ({"num_heads": 2, "dtype": torch.int32}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        DynamicPositionBias(**kwargs)


def test_attention_checks_positions_against_the_table() -> None:
    dpb = DynamicPositionBias(HEADS, hidden=4, max_seq_len=8)
    q = torch.randn(1, HEADS, 9, 4)
    with pytest.raises(ValueError, match="max_seq_len"):
        attend(q, q, q, pos=dpb, causal=True)
