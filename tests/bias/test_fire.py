"""FIRE: the paper's formula in float64, interpolation properties, KV cache, flex, gradcheck."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.bias import fire as fire_module
from posenc.bias.fire import FireBias
from tests.attention.test_backends import run
from tests.attention.test_flash import record_plans
from tests.attention.test_flex import evaluate_score_mod

HEADS = 3


def _randomize(fire: FireBias, *, c: float = 0.3, s: float = 0.75) -> FireBias:
    """Non-default parameters, so that a swapped or ignored one shows."""
    with torch.no_grad():
        for layer in fire.mlp:
            if isinstance(layer, nn.Linear):
                nn.init.normal_(layer.weight)
                nn.init.normal_(layer.bias)
        fire.c.fill_(c)
        fire.threshold_multiplier.fill_(s)
    return fire


def paper_formula(fire: FireBias, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """b_h(i, j) = MLP(ψ(i − j) / (ψ(max(i, |L·s|)) + ε))_h, ψ(x) = ln(|c·x| + 1), float64.

    Written from the paper's definition (and its appendix code), without the module's code.
    """
    c = fire.c.detach().double()
    s = fire.threshold_multiplier.detach().double()
    i = q_pos.double()[:, None]
    j = k_pos.double()[None, :]

    def psi(x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.abs(c * x) + 1)

    threshold = torch.abs(fire.max_len * s)
    x = psi(i - j) / (psi(torch.maximum(i, threshold)) + fire.eps)  # (q, k)
    w1, b1 = fire.mlp[0].weight.detach().double(), fire.mlp[0].bias.detach().double()
    w2, b2 = fire.mlp[2].weight.detach().double(), fire.mlp[2].bias.detach().double()
    hidden = torch.relu(x[..., None] @ w1.T + b1)  # (q, k, hidden)
    return (hidden @ w2.T + b2).permute(2, 0, 1)  # (heads, q, k)


@pytest.mark.parametrize(("hidden", "max_len"), [(32, 512.0), (8, 6.0), (5, 20.0)])
@pytest.mark.parametrize("q_start", [0, 30])  # whole sequence; the last 10 of 40 (KV cache)
def test_matches_paper_formula_float64(hidden: int, max_len: float, q_start: int) -> None:
    # max_len 6 and 20 put most queries past the threshold |L·s| = 0.75·L, 512 none.
    fire = _randomize(FireBias(HEADS, hidden=hidden, max_len=max_len, dtype=torch.float64))
    q_pos, k_pos = torch.arange(q_start, 40), torch.arange(40)
    got = fire.bias(q_pos, k_pos)
    assert got.dtype == torch.float64
    assert_close(got, paper_formula(fire, q_pos, k_pos), rtol=1e-12, atol=1e-12)


def test_float32_matches_float64_formula_and_fractional_positions() -> None:
    # A negative multiplier: the threshold is |L·s| = 24.
    fire = _randomize(FireBias(HEADS, max_len=16.0), s=-1.5)
    q_pos = torch.tensor([0.5, 3.25, 17.0, 40.5])  # fractional (PI), both sides of 24
    k_pos = torch.linspace(0.0, 40.5, 9)
    got = fire.bias(q_pos, k_pos)
    assert got.dtype == torch.float32
    assert_close(got.double(), paper_formula(fire, q_pos, k_pos), rtol=1e-5, atol=1e-5)


def test_defaults_follow_the_paper() -> None:
    fire = FireBias(4)
    assert FireBias.shared_across_layers is False
    assert (fire.hidden, fire.max_len, fire.eps) == (32, 512.0, 1e-6)
    assert fire.c.item() == pytest.approx(0.1)
    assert fire.threshold_multiplier.item() == 1.0
    assert [type(m) for m in fire.mlp] == [nn.Linear, nn.ReLU, nn.Linear]
    assert fire.mlp[0].weight.shape == (32, 1) and fire.mlp[2].weight.shape == (4, 32)
    # Learned: c, s and the MLP; L and eps are fixed.
    names = {name for name, p in fire.named_parameters() if p.requires_grad}
    assert names == {
        "c",
        "threshold_multiplier",
        "mlp.0.weight",
        "mlp.0.bias",
        "mlp.2.weight",
        "mlp.2.bias",
    }


def test_normalized_input_is_monotone_in_distance_and_within_unit_interval() -> None:
    # The paper's ψ is increasing and i − j ≤ max(i, L): the MLP input of a causal pair is in
    # [0, 1) and grows with the distance for every query.
    fire = FireBias(2, max_len=10.0)
    pos = torch.arange(64)
    x = fire.normalized_distance(pos[:, None], pos[None, :], torch.float64)  # (q, k)
    causal = pos[:, None] >= pos[None, :]
    assert bool((x[causal] >= 0).all()) and bool((x[causal] < 1).all())
    # Along a row, moving the key one step back (j − 1) never decreases the input.
    steps = x[:, :-1] - x[:, 1:]
    assert bool((steps[causal[:, 1:]] > 0).all())


def test_below_threshold_the_bias_depends_on_the_distance_only() -> None:
    fire = _randomize(FireBias(HEADS, max_len=16.0), s=1.0)
    q_pos, k_pos = torch.arange(4, 9), torch.arange(9)
    base = fire.bias(q_pos, k_pos)
    # All queries stay at or below the threshold 16: a shift changes nothing, bit for bit.
    assert_close(fire.bias(q_pos + 7, k_pos + 7), base, rtol=0, atol=0)
    # Past it the normalizer grows with i (progressive interpolation): the shift shows.
    shifted = fire.bias(q_pos + 40, k_pos + 40)
    assert not torch.allclose(shifted, base, rtol=1e-3, atol=1e-3)


def test_above_threshold_the_farthest_key_maps_to_one() -> None:
    # Progressive interpolation: beyond the threshold, ψ(i − 0) / ψ(i) ≈ 1 for every i, so
    # the first key gets the same bias at every length (up to ε).
    fire = _randomize(FireBias(HEADS, max_len=8.0), s=1.0)
    q_pos = torch.tensor([8, 50, 400, 3000])
    x = fire.normalized_distance(q_pos, torch.zeros_like(q_pos), torch.float64)
    assert_close(x, torch.ones(4, dtype=torch.float64), rtol=0, atol=1e-5)
    first_key = fire.bias(q_pos, torch.tensor([0]))[..., 0]  # (heads, 4)
    assert_close(first_key, first_key[:, :1].expand(HEADS, 4), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("new", [1, 5])
def test_kv_cache_rows_equal_the_full_bias(new: int) -> None:
    fire = _randomize(FireBias(HEADS, max_len=12.0))
    n = 30
    full = fire.bias(torch.arange(n), torch.arange(n))
    step = fire.bias(torch.arange(n - new, n), torch.arange(n))
    # The grid's MLP is a matmul over the query rows: fewer rows are another matmul, whose
    # sums another CPU's kernels may round differently (7e-7 apart with ATen's AVX2 or
    # scalar kernels): equal to float32 rounding, not bitwise.
    assert_close(step, full[:, n - new :])


def test_batched_positions() -> None:
    fire = _randomize(FireBias(HEADS, max_len=12.0))
    q_pos = torch.tensor([[3, 4, 9], [20, 50, 300]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 9], [0, 19, 20, 50, 299, 300]])
    got = fire.bias(q_pos, k_pos)
    assert got.shape == (2, HEADS, 3, 6)
    for b in range(2):
        assert_close(got[b], fire.bias(q_pos[b], k_pos[b]), rtol=0, atol=0)
    # A batch of one broadcasts.
    shared = fire.bias(q_pos[1:], k_pos)
    assert_close(shared[1], got[1], rtol=0, atol=0)
    assert_close(shared[0], fire.bias(q_pos[1], k_pos[0]), rtol=0, atol=0)


def test_dtype_follows_parameters_and_computes_wide() -> None:
    fire = _randomize(FireBias(HEADS, max_len=12.0))
    pos = torch.arange(20)
    assert fire.bias(pos, pos).dtype == torch.float32
    half = FireBias(HEADS, max_len=12.0, dtype=torch.bfloat16)
    half.load_state_dict(fire.state_dict())
    assert half.bias(pos, pos).dtype == torch.bfloat16
    # Asked for float32, bfloat16 parameters are widened before the MLP: only their own
    # rounding differs from the float32 module, not a bfloat16 evaluation.
    widened = FireBias(HEADS, max_len=12.0)
    widened.load_state_dict(half.state_dict())
    assert_close(half.bias(pos, pos, torch.float32), widened.bias(pos, pos), rtol=0, atol=0)
    assert not torch.equal(half.bias(pos, pos).float(), widened.bias(pos, pos))


def test_gradcheck_every_parameter() -> None:
    fire = _randomize(FireBias(2, hidden=4, max_len=4.0, dtype=torch.float64), s=1.0)
    # Queries on both sides of the threshold 4 (not at it: max has a kink there).
    q_pos, k_pos = torch.tensor([1, 2, 3, 5, 7]), torch.arange(8)
    names = [name for name, _ in fire.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in fire.parameters())

    def fn(*values: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(
            fire, dict(zip(names, values, strict=True)), (q_pos, k_pos)
        )

    assert torch.autograd.gradcheck(fn, params)
    # Every parameter receives a gradient (s through the rows below the threshold).
    out = fn(*params)
    grads = torch.autograd.grad(out.sum(), params)
    assert all(bool(g.abs().sum() > 0) for g in grads)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batched", [False, True])
def test_score_mod_equals_materialized_bias(batched: bool, dtype: torch.dtype) -> None:
    fire = _randomize(FireBias(HEADS, max_len=10.0))
    hooks = hooks_of(fire)
    q_pos = torch.tensor([[3, 4, 9], [0, 50, 300]]) if batched else torch.tensor([7, 8, 200])
    k_pos = (
        torch.tensor([[0, 1, 2, 3, 4, 9, 12], [0, 1, 50, 51, 200, 300, 299]])
        if batched
        else torch.arange(200, 207)
    )
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, q_pos, k_pos)
    got = evaluate_score_mod(score_mod, 2, HEADS, 3, 7, dtype)
    heads = torch.arange(HEADS).view(-1, 1, 1)
    want = fire.bias_at(heads, q_pos[..., None, :, None], k_pos[..., None, None, :], dtype)
    assert_close(got, want.expand(2, HEADS, 3, 7), rtol=0, atol=0)  # the same ops, bit for bit
    # The materialized paths' grid (a matmul): the same values up to rounding.
    assert_close(hooks.materialized_bias(q_pos, k_pos, dtype).expand(2, HEADS, 3, 7), got)


@pytest.mark.parametrize("batched", [False, True])
def test_grid_equals_the_pointwise_mlp_with_its_gradients(
    batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Slices of 3 rows (hidden 7, 20 keys) or 2 rows (6 keys), the last one shorter.
    slice_elements = 7 * 6 * 3 if batched else 7 * 20 * 3
    monkeypatch.setattr(fire_module, "GRID_SLICE_ELEMENTS", slice_elements)
    fire = _randomize(FireBias(HEADS, hidden=7, max_len=6.0, dtype=torch.float64))
    q_pos = torch.tensor([[0, 3, 9, 15], [2, 5, 6, 40]]) if batched else torch.arange(4, 20)
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 9], [0, 4, 5, 6, 7, 8]]) if batched else torch.arange(20)
    heads = torch.arange(HEADS).view(-1, 1, 1)
    grid = fire.bias_grid(q_pos, k_pos, torch.float64)
    pointwise = fire.bias_at(
        heads, q_pos[..., None, :, None], k_pos[..., None, None, :], torch.float64
    )
    assert grid.shape == pointwise.shape
    assert_close(grid, pointwise, rtol=1e-13, atol=1e-13)
    with torch.no_grad():  # the in-place path (no autograd) gives the same grid
        assert_close(fire.bias_grid(q_pos, k_pos, torch.float64), grid, rtol=0, atol=0)
    weights = torch.randn_like(grid)
    params = list(fire.parameters())
    for g, w in zip(
        torch.autograd.grad((grid * weights).sum(), params),
        torch.autograd.grad((pointwise * weights).sum(), params),
        strict=True,
    ):
        assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_chunked_backend_gradients_equal_sdpa() -> None:
    # The chunked backend recomputes bias_at under activation checkpointing.
    fire = _randomize(FireBias(HEADS, max_len=6.0, dtype=torch.float64))
    q, k, v = (torch.randn(2, HEADS, 20, 8, dtype=torch.float64) for _ in range(3))
    causal = {"causal": True}
    want, want_grads = run("sdpa", fire, q, k, v, causal, grad=True)
    got, got_grads = run(Backend("chunked", block_size=6), fire, q, k, v, causal, grad=True)
    assert_close(got, want)
    assert len(got_grads) == len(want_grads) == 3 + len(list(fire.parameters()))
    for g, w in zip(got_grads, want_grads, strict=True):  # q, k, v, then every parameter
        assert_close(g, w)


@pytest.mark.parametrize(("max_len", "plan"), [(30.0, "distance table"), (25.0, None)])
def test_below_the_threshold_chunked_reads_one_table_of_distances(
    max_len: float, plan: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every query of 20 tokens below |L·s| (s = 0.75: 22.5 for L = 30): the bias is a
    function of the distance, served by the distance plan with the gradients of c, s and the
    MLP; at L = 25 (threshold 18.75) the last rows are past it and blocks take over."""
    chosen = record_plans(monkeypatch)
    fire = _randomize(FireBias(HEADS, max_len=max_len, dtype=torch.float64))
    assert fire.distance_only_up_to(19) == (plan is not None)
    q, k, v = (torch.randn(2, HEADS, 20, 8, dtype=torch.float64) for _ in range(3))
    causal = {"causal": True}
    want, want_grads = run("sdpa", fire, q, k, v, causal, grad=True)
    got, got_grads = run(Backend("chunked", block_size=6), fire, q, k, v, causal, grad=True)
    assert chosen == [plan]
    assert_close(got, want)
    for g, w in zip(got_grads, want_grads, strict=True):  # q, k, v, then every parameter
        assert_close(g, w)
    assert all(bool(g.abs().sum() > 0) for g in got_grads[3:])  # c and s included


@pytest.mark.slow
@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
def test_compiled_flex_equals_sdpa() -> None:
    torch._dynamo.reset()
    fire = _randomize(FireBias(HEADS, hidden=8, max_len=64.0))
    q, k, v = (torch.randn(2, HEADS, 256, 16) for _ in range(3))
    with torch.no_grad():
        got = attend(q, k, v, pos=fire, causal=True, backend=Backend("flex"))
        want = attend(q, k, v, pos=fire, causal=True, backend="sdpa")
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2.0}, "num_heads"),
        ({"num_heads": True}, "num_heads"),
        ({"num_heads": 2, "hidden": 0}, "hidden"),
        ({"num_heads": 2, "hidden": 3.5}, "hidden"),
        ({"num_heads": 2, "max_len": 0}, "max_len"),
        ({"num_heads": 2, "max_len": -512}, "max_len"),
        ({"num_heads": 2, "max_len": float("inf")}, "max_len"),
        ({"num_heads": 2, "eps": 0.0}, "eps"),
        ({"num_heads": 2, "eps": float("nan")}, "eps"),
        ({"num_heads": 2, "c_init": 0.0}, "c_init"),
        ({"num_heads": 2, "c_init": -0.1}, "c_init"),
        ({"num_heads": 2, "c_init": "0.1"}, "c_init"),
        ({"num_heads": 2, "dtype": torch.long}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        FireBias(**kwargs)
