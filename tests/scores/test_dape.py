"""DAPE: a float64 loop over pairs of the formula, the reference's layout and init, masked
pairs, sdpa = chunked (outputs and gradients), KV-cache decoding, gradcheck, bad input."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.testing import assert_close

from posenc.attention import Attention, Backend, KVCache, attend, hooks_of
from posenc.bias.alibi import AlibiBias
from posenc.bias.kerple import KerpleBias
from posenc.bias.t5 import T5RelativeBias
from posenc.contextual.shaw import ShawRelative
from posenc.encoding import ContextualEncoding
from posenc.scores.dape import DapeBias, dape_scores
from tests.attention.test_backends import run
from tests.attention.test_flash import record_plans

HEADS = 4
# KERPLE parameters (in range): r1 the scale, r2 the distance scale / exponent.
R1 = [0.5, 1.7, 0.3, 1.1]
R2 = [0.8, 0.05, 1.3, 1.9]
INNERS = ["alibi", "kerple-log", "kerple-power", None]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Any:
    """These tensors are tiny: a second intra-op thread only adds synchronization, which on a
    busy machine costs tens of milliseconds per op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_inner(kind: str | None, dtype: torch.dtype = torch.float64) -> nn.Module | None:
    if kind is None:
        return None
    if kind == "alibi":
        return AlibiBias(HEADS)
    kerple = KerpleBias(HEADS, kernel=kind.split("-")[1], dtype=dtype)  # type: ignore[arg-type]
    with torch.no_grad():
        kerple.r1.copy_(torch.tensor(R1, dtype=torch.float64))
        kerple.r2.copy_(torch.tensor(R2, dtype=torch.float64))
    return kerple


def make_dape(kind: str | None, hidden: int = 6, seed: int = 0) -> DapeBias:
    """DAPE in float64 with weights far from their init, so a swapped one shows."""
    dape = DapeBias(HEADS, make_inner(kind), hidden=hidden, dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in dape.mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.7)
    return dape


def reference_bias(kind: str, i: float, j: float) -> list[float]:
    """B_{:, ij} written from the papers: ALiBi ``-m_h (i - j)`` with ``m_h = 2^(-8h/H)``;
    KERPLE log ``-r1 ln(1 + r2 |i - j|)``, power ``-r1 |i - j|^r2``."""
    if kind == "alibi":
        return [-(2.0 ** (-8.0 * (h + 1) / HEADS)) * (i - j) for h in range(HEADS)]
    distance = abs(i - j)
    if kind == "kerple-log":
        return [-R1[h] * math.log(1.0 + R2[h] * distance) for h in range(HEADS)]
    return [-R1[h] * distance ** R2[h] for h in range(HEADS)]


def direct_formula(
    dape: DapeBias, kind: str | None, scores: Tensor, q_pos: Tensor, k_pos: Tensor
) -> Tensor:
    """``A + B + W2 LeakyReLU(W1 [A; B] + b1) + b2`` pair by pair, in float64 (``A + f(A)``
    without a bias); positions ``(seq,)`` or ``(batch, seq)``."""
    w1, b1 = dape.mlp[0].weight.detach().double(), dape.mlp[0].bias.detach().double()
    w2, b2 = dape.mlp[2].weight.detach().double(), dape.mlp[2].bias.detach().double()
    batch, heads, q_len, k_len = scores.shape
    out = torch.empty(batch, heads, q_len, k_len, dtype=torch.float64)
    for b in range(batch):
        qp = q_pos[b if q_pos.dim() == 2 else ...].tolist()
        kp = k_pos[b if k_pos.dim() == 2 else ...].tolist()
        for i in range(q_len):
            for j in range(k_len):
                a = scores[b, :, i, j].double()
                if kind is None:
                    x, bias = a, torch.zeros(heads, dtype=torch.float64)
                else:
                    bias = torch.tensor(reference_bias(kind, qp[i], kp[j]), dtype=torch.float64)
                    x = torch.cat([a, bias])
                hidden = w1 @ x + b1
                hidden = torch.where(hidden > 0, hidden, 0.01 * hidden)
                out[b, :, i, j] = a + bias + w2 @ hidden + b2
    return out


POSITIONS = {
    "self": (torch.arange(6), torch.arange(6)),
    "cache": (torch.arange(5, 7), torch.arange(7)),
    "fractional": (torch.tensor([1.5, 2.25]), torch.tensor([0.0, 0.5, 1.0, 2.25, 7.75])),
    "batched": (
        torch.tensor([[3, 4], [10, 11]]),
        torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]]),
    ),
}


@pytest.mark.parametrize("kind", INNERS)
@pytest.mark.parametrize("case", list(POSITIONS))
def test_matches_direct_formula(kind: str | None, case: str) -> None:
    q_pos, k_pos = POSITIONS[case]
    dape = make_dape(kind)
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(2, HEADS, q_pos.shape[-1], k_pos.shape[-1], generator=generator)
    scores = scores.double() * 3.0
    got = dape(scores, q_pos, k_pos)
    assert got.dtype == torch.float64
    assert_close(got, direct_formula(dape, kind, scores, q_pos, k_pos))


def reference_forward(mlp2: nn.Sequential, x: Tensor, kind: str | None) -> Tensor:
    """The reference's ``AliBi_C`` / ``ParallelKerpleLog_C`` / ``Nope_C`` forward on scaled,
    unmasked logits ``x`` ``(b, H, sq, sk)``: its ``tril``-ed bias on the ``(sk, sk)`` grid,
    row ``sk - 1`` when ``sq == 1``, then ``x + bias + mlp2(cat(x, tile(bias)))``."""
    sq, sk = x.shape[-2:]
    if kind is None:
        return x + mlp2(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    diff = torch.tril(torch.arange(sk)[:, None] - torch.arange(sk)[None, :]).double()
    if kind == "alibi":
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / HEADS) for h in range(HEADS)]).double()
        bias = -diff * slopes.view(-1, 1, 1)
    else:
        p, a = (torch.tensor(r, dtype=torch.float64).view(-1, 1, 1) for r in (R1, R2))
        bias = -p * torch.log(1 + a * diff)
    if sq != sk:
        assert sq == 1
        bias = bias[:, sk - 1, :].view(bias.shape[0], 1, bias.shape[2])
    both = torch.cat((x, torch.tile(bias, (x.shape[0], 1, 1, 1))), dim=1)
    return x + bias + mlp2(both.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


@pytest.mark.parametrize("kind", ["alibi", "kerple-log", None])
def test_reference_layout_visible_pairs_and_kv_row(kind: str | None) -> None:
    torch.manual_seed(3)
    channels = HEADS if kind is None else 2 * HEADS
    mlp2 = nn.Sequential(nn.Linear(channels, 32), nn.LeakyReLU(), nn.Linear(32, HEADS)).double()
    dape = DapeBias(HEADS, make_inner(kind), dtype=torch.float64)
    dape.mlp.load_state_dict(mlp2.state_dict())
    x = torch.randn(2, HEADS, 9, 9, dtype=torch.float64)
    visible = torch.ones(9, 9, dtype=torch.bool).tril()
    with torch.no_grad():
        want = reference_forward(mlp2, x, kind)
        got = dape(x)
        assert_close(got.masked_fill(~visible, 0.0), want.masked_fill(~visible, 0.0))
        # One new token over a cache of 9: the reference keeps row k - 1 of its bias.
        row = x[:, :, -1:]
        assert_close(dape(row), reference_forward(mlp2, row, kind))


@pytest.mark.parametrize("kind", ["alibi", None])
def test_init_is_the_reference_draw(kind: str | None) -> None:
    channels = HEADS if kind is None else 2 * HEADS
    torch.manual_seed(11)
    mlp2 = nn.Sequential(nn.Linear(channels, 32), nn.LeakyReLU(), nn.Linear(32, HEADS))
    torch.manual_seed(11)
    dape = DapeBias(HEADS, make_inner(kind))  # ALiBi draws nothing
    seeded = DapeBias(HEADS, make_inner(kind), generator=torch.Generator().manual_seed(11))
    for module in (dape, seeded):
        got, want = module.mlp.state_dict(), mlp2.state_dict()
        assert list(got) == list(want) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        for name in want:
            assert_close(got[name], want[name], rtol=0, atol=0)


def test_masked_pairs_never_enter_the_mlp() -> None:
    dape = make_dape("kerple-log")
    parts = [p.detach() for p in dape.mlp.parameters()]
    generator = torch.Generator().manual_seed(2)
    clean = torch.randn(2, HEADS, 5, 8, generator=generator, dtype=torch.float64)
    bias = dape.inner_bias(torch.arange(3, 8), torch.arange(8), torch.float64)
    padding = torch.tensor([[True] * 8, [False] * 2 + [True] * 6])
    allowed = (torch.arange(8) <= torch.arange(3, 8)[:, None]) & padding[:, None, None]
    dirty = clean.masked_fill(~allowed, float("-inf"))
    dirty[1, :, :, 0] = float("nan")  # a padded key with a NaN logit
    dirty[0, 0, 0, 7] = torch.finfo(torch.float64).min
    assert allowed.shape == (2, 1, 5, 8)

    def masked_result(scores: Tensor, w: list[Tensor]) -> Tensor:
        out = dape_scores(scores, bias, *w, allowed=allowed)
        return out.masked_fill(~allowed, 0.0)

    weights = [p.clone().requires_grad_(True) for p in parts]
    got = dape_scores(dirty, bias, *weights, allowed=allowed)
    assert bool(torch.isfinite(got).all())
    masked_result(dirty, weights).sum().backward()
    want = masked_result(clean, parts)
    assert_close(got.masked_fill(~allowed, 0.0), want)
    assert_close(
        got.masked_fill(~allowed, 0.0), dape_scores(clean, bias, *parts).masked_fill(~allowed, 0.0)
    )
    for w in weights:
        assert w.grad is not None and bool(torch.isfinite(w.grad).all())


def test_pairs_visible_to_some_head_are_not_zeroed() -> None:
    dape = make_dape("alibi")
    parts = [p.detach() for p in dape.mlp.parameters()]
    scores = torch.randn(1, HEADS, 4, 4, dtype=torch.float64)
    bias = dape.inner_bias(torch.arange(4), torch.arange(4), torch.float64)
    allowed = torch.ones(1, HEADS, 4, 4, dtype=torch.bool)
    allowed[0, 1:, 0, 3] = False  # hidden from heads 1.. only: head 0 reads the raw pair
    allowed[0, :, 2, 1] = False  # hidden from every head
    got = dape_scores(scores, bias, *parts, allowed=allowed)
    want = dape_scores(scores, bias, *parts)
    some = allowed.any(dim=1, keepdim=True).expand_as(want)
    assert_close(got[some], want[some], rtol=0, atol=0)
    # The pair hidden from every head: the MLP read zeros (logits and bias), so f(0).
    _, b1, w2, b2 = parts
    f_of_zero = w2 @ torch.nn.functional.leaky_relu(b1, 0.01) + b2
    assert_close(got[0, :, 2, 1], f_of_zero)
    assert not torch.equal(got[~some], want[~some])


def mask_case(kind: str) -> tuple[int, dict[str, Any]]:
    length = 24
    padding = torch.ones(2, length, dtype=torch.bool)
    padding[0, :7] = False  # left padding: the first queries of row 0 see no key
    padding[1, 19:] = False
    if kind == "causal":
        return length, {"causal": True}
    if kind == "bidirectional":
        return length, {"causal": False}
    if kind == "padding":
        return length, {"causal": True, "key_padding_mask": padding}
    if kind == "padding-bidirectional":
        return length, {"causal": False, "key_padding_mask": padding}
    if kind == "cache":  # 5 new tokens after 19 cached ones, rows at different offsets
        k_pos = torch.tensor([0, 40])[:, None] + torch.arange(length)
        return 5, {
            "causal": True,
            "key_padding_mask": padding,
            "k_pos": k_pos,
            "q_pos": k_pos[:, -5:],
        }
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["alibi", "kerple-log", None])
@pytest.mark.parametrize(
    "mask", ["causal", "bidirectional", "padding", "padding-bidirectional", "cache"]
)
@pytest.mark.parametrize("grad", [True, False], ids=["blocks", "plan"])
def test_chunked_equals_sdpa_outputs_and_gradients(
    kind: str | None, mask: str, grad: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checkpointed blocks with gradients; without, the scores plan (``B + f([A; B])`` as
    the flash kernel's mask)."""
    chosen = record_plans(monkeypatch)
    dape = make_dape(kind)
    q_len, kwargs = mask_case(mask)
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(2, HEADS, q_len, 8, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(2, HEADS, 24, 8, generator=generator, dtype=torch.float64) for _ in "kv")
    want, want_grads = run("sdpa", dape, q, k, v, kwargs, grad=grad)
    got, got_grads = run(Backend("chunked", block_size=5), dape, q, k, v, kwargs, grad=grad)
    assert_close(got, want)
    assert len(got_grads) == len(want_grads) == (3 + len(list(dape.parameters()))) * grad
    for g, w in zip(got_grads, want_grads, strict=True):  # q, k, v, MLP, then inner
        assert_close(g, w)
    assert chosen == [None if grad else "scores term"]


@pytest.mark.parametrize("kind", ["kerple-power", None])
def test_attention_applies_dape_then_the_mask(kind: str | None) -> None:
    dape = make_dape(kind)
    q, k, v = (torch.randn(2, HEADS, 7, 8, dtype=torch.float64) for _ in range(3))
    padding = torch.tensor([[True] * 7, [False] * 3 + [True] * 4])
    allowed = (torch.arange(7) <= torch.arange(7)[:, None]) & padding[:, None, None]
    with torch.no_grad():
        scores = dape(q @ k.transpose(-1, -2) / math.sqrt(8))
        manual = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0) @ v
        got = attend(q, k, v, pos=dape, causal=True, key_padding_mask=padding)
    assert_close(got, manual)


@pytest.mark.parametrize("backend", ["sdpa", "chunked"])
@pytest.mark.parametrize("new", [1, 3])
def test_kv_cache_decoding_equals_the_full_forward(backend: str, new: int) -> None:
    torch.manual_seed(5)
    dape = DapeBias(HEADS, KerpleBias(HEADS, dtype=torch.float64), dtype=torch.float64)
    attention = Attention(32, HEADS, pos=dape, backend=backend, dtype=torch.float64)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    with torch.no_grad():
        full = attention(x)
        cache = KVCache()
        attention(x[:, :-new], cache=cache)
        step = attention(x[:, -new:], cache=cache)
        # attend on the last rows only (default positions: the queries are the last keys)
        q, k, v = (torch.randn(1, HEADS, 12, 8, dtype=torch.float64) for _ in range(3))
        rows = attend(q[:, :, -new:], k, v, pos=dape, causal=True, backend=backend)
        whole = attend(q, k, v, pos=dape, causal=True, backend=backend)
    assert_close(step, full[:, -new:])
    assert_close(rows, whole[:, :, -new:])


def test_gradcheck_mlp_and_kerple_parameters_and_scores() -> None:
    dape = make_dape("kerple-log", hidden=3)
    q_pos, k_pos = torch.arange(2, 5), torch.arange(5)
    names = ["mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias", "inner.r1", "inner.r2"]
    state = dict(dape.named_parameters())
    leaves = [state[n].detach().clone().requires_grad_(True) for n in names]
    scores = torch.randn(2, HEADS, 3, 5, dtype=torch.float64, requires_grad=True)

    def fn(scores: Tensor, *params: Tensor) -> Tensor:
        return torch.func.functional_call(
            dape, dict(zip(names, params, strict=True)), (scores, q_pos, k_pos)
        )

    assert torch.autograd.gradcheck(fn, (scores, *leaves))


def test_gradcheck_through_attention_with_a_mask() -> None:
    dape = make_dape("kerple-power", hidden=3)
    names = [n for n, _ in dape.named_parameters()]
    leaves = [p.detach().clone().requires_grad_(True) for _, p in dape.named_parameters()]
    q, k, v = (torch.randn(1, HEADS, 4, 3, dtype=torch.float64) for _ in range(3))
    padding = torch.tensor([[False, True, True, True]])

    backend = Backend("chunked", block_size=2)  # several blocks, activation checkpointing

    class Attend(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dape = dape

        def forward(self) -> Tensor:
            return attend(
                q, k, v, pos=self.dape, causal=True, key_padding_mask=padding, backend=backend
            )

    wrapper = Attend()

    def fn(*params: Tensor) -> Tensor:
        named = {f"dape.{n}": p for n, p in zip(names, params, strict=True)}
        return torch.func.functional_call(wrapper, named, ())

    assert torch.autograd.gradcheck(fn, tuple(leaves))


def test_half_precision_computes_in_float32_and_rounds_once() -> None:
    dape = DapeBias(HEADS, KerpleBias(HEADS), generator=torch.Generator().manual_seed(0))
    q, k, v = (torch.randn(2, HEADS, 9, 8).to(torch.bfloat16) for _ in range(3))
    with torch.no_grad():
        half = attend(q, k, v, pos=dape, causal=True, backend="chunked")
        wide = attend(q.float(), k.float(), v.float(), pos=dape, causal=True, backend="chunked")
        assert half.dtype == torch.bfloat16
        assert_close(half, wide.to(torch.bfloat16), rtol=0, atol=0)
        # bf16 weights are read as they are (bf16 → float32 is exact), the MLP runs in float32.
        # (requires_grad off in both: matmul's path, hence its rounding, depends on it.)
        dape.requires_grad_(False).to(torch.bfloat16)
        scores = torch.randn(1, HEADS, 3, 3)
        got = dape(scores)
        assert got.dtype == torch.float32
        assert_close(got, dape.float()(scores), rtol=0, atol=0)


def test_hooks_and_state() -> None:
    kerple = KerpleBias(HEADS)
    dape = DapeBias(HEADS, kerple, hidden=8)
    hooks = hooks_of(dape)
    assert hooks.scores and not hooks.bias and not hooks.contextual and hooks.num_axes == 1
    assert dape.num_heads == HEADS and DapeBias.shared_across_layers is False
    assert set(dape.state_dict()) == {
        "mlp.0.weight",
        "mlp.0.bias",
        "mlp.2.weight",
        "mlp.2.bias",
        "inner.r1",
        "inner.r2",
    }
    assert dape.mlp[0].weight.shape == (8, 2 * HEADS) and dape.mlp[2].weight.shape == (HEADS, 8)
    assert DapeBias(HEADS).mlp[0].weight.shape == (32, HEADS)
    assert any(p is kerple.r1 for p in dape.parameters())  # the inner bias trains with DAPE
    assert "hidden=8" in repr(dape)
    meta = DapeBias(HEADS, device="meta")
    assert meta.mlp[0].weight.device.type == "meta"


def test_flex_cannot_serve_it() -> None:
    dape = DapeBias(HEADS, AlibiBias(HEADS))
    with pytest.raises(ValueError, match="flex"):
        Backend("flex", compile=False).check(hooks_of(dape), dropout=0.0)
    q = torch.randn(1, HEADS, 4, 8)
    with pytest.raises(ValueError, match="flex"):
        attend(q, q, q, pos=dape, causal=True, backend=Backend("flex", compile=False))


def test_positions_are_checked_by_the_inner_bias() -> None:
    dape = DapeBias(HEADS, T5RelativeBias(HEADS))
    q = torch.randn(1, HEADS, 3, 8)
    with pytest.raises(ValueError, match="q_pos"):
        attend(q, q, q, pos=dape, causal=True, q_pos=torch.tensor([0.5, 1.0, 2.0]))
    with pytest.raises(ValueError, match="k_pos"):
        dape(torch.randn(1, HEADS, 3, 3), torch.arange(3), torch.tensor([0.0, 1.5, 2.0]))
    # Without an inner bias nothing reads positions: fractional ones are fine.
    DapeBias(HEADS)(torch.randn(1, HEADS, 2, 2), torch.tensor([0.5, 1.0]), torch.arange(2))


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2.0}, "num_heads"),
        ({"num_heads": HEADS, "hidden": 0}, "hidden"),
        ({"num_heads": HEADS, "hidden": 1.5}, "hidden"),
        ({"num_heads": HEADS, "dtype": torch.int64}, "dtype"),
        ({"num_heads": HEADS, "inner": torch.zeros(3)}, "inner"),
        ({"num_heads": HEADS, "inner": AlibiBias(HEADS + 1)}, "inner"),
        ({"num_heads": HEADS, "inner": DapeBias(HEADS)}, "inner"),  # a scores reader
        ({"num_heads": HEADS, "inner": ShawRelative(8)}, "inner"),  # a contextual term
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        DapeBias(**kwargs)


class _BiasAndTerm(AlibiBias, ContextualEncoding):
    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        return torch.zeros(())


def test_inner_with_another_logit_hook_is_refused() -> None:
    with pytest.raises(ValueError, match=r"inner.*logit_term"):
        DapeBias(HEADS, _BiasAndTerm(HEADS))


@pytest.mark.parametrize(
    ("scores", "q_pos", "k_pos", "name"),
    [
        (torch.randn(HEADS, 3, 3), None, None, "scores"),
        (torch.randn(1, HEADS + 1, 3, 3), None, None, "scores"),
        (torch.ones(1, HEADS, 3, 3, dtype=torch.long), None, None, "scores"),
        (torch.randn(1, HEADS, 3, 3), torch.tensor([0.0, float("nan"), 2.0]), None, "q_pos"),
        (torch.randn(1, HEADS, 3, 3), torch.arange(2), None, "q_pos"),
        (torch.randn(1, HEADS, 3, 3), None, torch.arange(4), "k_pos"),
        (torch.randn(2, HEADS, 3, 3), None, torch.zeros(3, 3), "k_pos"),
    ],
)
def test_bad_forward_input(scores: Tensor, q_pos: Any, k_pos: Any, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        DapeBias(HEADS, AlibiBias(HEADS))(scores, q_pos, k_pos)


def test_head_count_must_match_the_attention() -> None:
    q = torch.randn(1, 2 * HEADS, 3, 8)
    with pytest.raises(ValueError, match="num_heads"):
        attend(q, q, q, pos=DapeBias(HEADS), causal=True)
