"""KERPLE: the paper's formula, the reference's init and clamping, gradients, hooks, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from posenc.attention import Backend, attend, hooks_of
from posenc.attention.flex import flex_available, score_mod_of
from posenc.bias.kerple import KerpleBias, kerple_bias
from tests.attention.test_flex import evaluate_score_mod

KERNELS = ["log", "power"]


def direct_formula(
    r1: list[float],
    r2: list[float],
    q_pos: list[float],
    k_pos: list[float],
    kernel: str,
    eps: float = 1e-2,
) -> torch.Tensor:
    """The paper's kernels in float64 with the reference's clamped parameter values:
    log ``-r1 ln(1 + r2 |m - n|)``, power ``-r1 |m - n|^r2``; ``r ≥ eps``, exponent ``≤ 2``."""
    rows = []
    for h in range(len(r1)):
        scale = max(r1[h], eps)
        shape = max(r2[h], eps) if kernel == "log" else min(max(r2[h], eps), 2.0)
        row = []
        for m in q_pos:
            line = []
            for n in k_pos:
                distance = abs(m - n)
                if kernel == "log":
                    line.append(-scale * math.log(1.0 + shape * distance))
                else:
                    line.append(-scale * distance**shape)
            row.append(line)
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64)


def with_parameters(kerple: KerpleBias, r1: list[float], r2: list[float]) -> KerpleBias:
    with torch.no_grad():
        kerple.r1.copy_(torch.tensor(r1, dtype=torch.float64))
        kerple.r2.copy_(torch.tensor(r2, dtype=torch.float64))
    return kerple


# Out-of-range raw values included: the bias must read them clamped, as the reference does.
R1 = [0.5, 1.7, 0.003, -0.2]
R2 = [0.8, 0.05, 1.3, 2.6]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("q_pos", "k_pos"),
    [
        ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]),  # self-attention, both directions
        ([9, 10], list(range(11))),  # KV cache
        ([1.5, 2.25], [0.0, 0.5, 1.0, 2.25, 7.75]),  # fractional positions (PI)
    ],
)
def test_bias_matches_direct_formula(kernel: str, q_pos: list, k_pos: list) -> None:
    kerple = with_parameters(KerpleBias(4, kernel=kernel, dtype=torch.float64), R1, R2)
    ours = kerple.bias(torch.tensor(q_pos), torch.tensor(k_pos))
    assert ours.dtype == torch.float64
    assert_close(ours, direct_formula(R1, R2, q_pos, k_pos, kernel), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("kernel", KERNELS)
def test_functional_form_matches_direct_formula(kernel: str) -> None:
    r1, r2 = [0.5, 1.7], [0.8, 1.3]
    q_pos, k_pos = [2.0, 3.5], [0.0, 1.0, 2.0, 3.5, 6.0]
    got = kerple_bias(
        torch.tensor(r1), torch.tensor(r2), torch.tensor(q_pos), torch.tensor(k_pos), kernel=kernel
    )
    want = direct_formula(r1, r2, q_pos, k_pos, kernel)
    assert_close(got, want, rtol=1e-6, atol=1e-7)  # r1, r2 given as float32


@pytest.mark.parametrize("kernel", KERNELS)
def test_reference_layout_causal_rows_and_kv_row(kernel: str) -> None:
    # The reference: diff = tril(i - j) on a (k, k) grid, bias = -p log(1 + a diff) or
    # -a diff^p; with one new token it keeps row k - 1. Visible pairs must agree.
    length = 9
    kerple = with_parameters(
        KerpleBias(3, kernel=kernel, dtype=torch.float64), [0.4, 1.2, 0.9], [0.6, 0.1, 1.9]
    )
    i = torch.arange(length)
    diff = torch.tril(i[:, None] - i[None, :]).to(torch.float64)
    scale, shape = kerple.r1.detach()[:, None, None], kerple.r2.detach()[:, None, None]
    if kernel == "log":
        reference = -scale * torch.log(1 + shape * diff)
    else:
        reference = -scale * diff.pow(shape)
    visible = torch.ones(length, length, dtype=torch.bool).tril()
    ours = kerple.bias(i, i)
    assert_close(ours.masked_fill(~visible, 0.0), reference.masked_fill(~visible, 0.0))
    assert_close(kerple.bias(i[-1:], i), reference[:, -1:, :])


@pytest.mark.parametrize("kernel", KERNELS)
def test_init_is_the_reference_draw_clamped(kernel: str) -> None:
    kerple = KerpleBias(64, kernel=kernel, generator=torch.Generator().manual_seed(3))
    generator = torch.Generator().manual_seed(3)
    p = (2.0 * torch.rand(64, generator=generator)).clamp(min=1e-2)  # drawn first
    a = torch.rand(64, generator=generator).clamp(min=1e-2)
    scale, shape = (p, a) if kernel == "log" else (a, p.clamp(max=2.0))
    assert_close(kerple.r1.detach(), scale, rtol=0, atol=0)
    assert_close(kerple.r2.detach(), shape, rtol=0, atol=0)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_monotone_non_increasing_in_distance_at_init(kernel: str, seed: int) -> None:
    kerple = KerpleBias(16, kernel=kernel, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        future = kerple.bias(torch.tensor([0]), torch.arange(300))[:, 0]  # |d| = 0..299
        past = kerple.bias(torch.tensor([299]), torch.arange(299, -1, -1))[:, 0]
    assert_close(future, future.cummin(dim=-1).values, rtol=0, atol=0)
    assert_close(past, future, rtol=0, atol=0)  # only |d| enters
    assert_close(future[:, 0], torch.zeros(16), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradcheck_parameters(kernel: str) -> None:
    kerple = KerpleBias(3, kernel=kernel, dtype=torch.float64)
    q_pos, k_pos = torch.arange(4, 8), torch.arange(8)  # includes |d| = 0 (0^p for power)
    r1 = torch.tensor([0.3, 1.1, 1.8], dtype=torch.float64, requires_grad=True)
    r2 = torch.tensor([0.2, 0.9, 1.7], dtype=torch.float64, requires_grad=True)

    def fn(r1: torch.Tensor, r2: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(kerple, {"r1": r1, "r2": r2}, (q_pos, k_pos))

    assert torch.autograd.gradcheck(fn, (r1, r2))


@pytest.mark.parametrize("kernel", KERNELS)
def test_out_of_range_parameters_read_clamped_with_identity_gradient(kernel: str) -> None:
    q_pos, k_pos = torch.arange(3, 6), torch.arange(6)
    weights = torch.linspace(-1.0, 2.0, 2 * 3 * 6, dtype=torch.float64).view(2, 3, 6)

    def value_and_grads(r1: list[float], r2: list[float]) -> tuple[torch.Tensor, ...]:
        kerple = with_parameters(KerpleBias(2, kernel=kernel, dtype=torch.float64), r1, r2)
        bias = kerple.bias(q_pos, k_pos)
        (bias * weights).sum().backward()
        assert kerple.r1.grad is not None and kerple.r2.grad is not None
        return bias.detach(), kerple.r1.grad, kerple.r2.grad

    high = 2.0 if kernel == "power" else 5.0  # power: the exponent's upper bound
    outside = value_and_grads([-0.3, 0.7], [0.001, 5.0])
    at_bounds = value_and_grads([1e-2, 0.7], [1e-2, high])
    for got, want in zip(outside, at_bounds, strict=True):
        assert_close(got, want, rtol=0, atol=0)


def test_clamp_parameters_projects_like_the_reference() -> None:
    kerple = with_parameters(KerpleBias(3, kernel="power"), [-1.0, 0.5, 0.001], [3.0, -2.0, 1.5])
    kerple.clamp_parameters_()
    assert_close(kerple.r1.detach(), torch.tensor([1e-2, 0.5, 1e-2]), rtol=0, atol=0)
    assert_close(kerple.r2.detach(), torch.tensor([2.0, 1e-2, 1.5]), rtol=0, atol=0)
    log = with_parameters(KerpleBias(2, eps=0.1), [0.05, 9.0], [7.0, 0.0])
    log.clamp_parameters_()
    assert_close(log.r1.detach(), torch.tensor([0.1, 9.0]), rtol=0, atol=0)
    assert_close(log.r2.detach(), torch.tensor([7.0, 0.1]), rtol=0, atol=0)


@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_score_mod_equals_materialized_bias(kernel: str, batched: bool, dtype: torch.dtype) -> None:
    kerple = KerpleBias(4, kernel=kernel, generator=torch.Generator().manual_seed(0))
    hooks = hooks_of(kerple)
    if batched:
        q_pos = torch.tensor([[3, 4, 9], [0, 50, 300]])
        k_pos = torch.tensor([[0, 1, 2, 3, 4, 9, 12], [0, 1, 50, 51, 200, 300, 299]])
    else:
        q_pos, k_pos = torch.tensor([7.5, 8.0, 200.0]), torch.arange(200, 207)
    hooks.prepare(torch.device("cpu"), dtype)
    score_mod = score_mod_of(hooks, q_pos, k_pos)
    assert score_mod is not None
    with torch.no_grad():
        got = evaluate_score_mod(score_mod, 2, 4, 3, 7, dtype)
        want = kerple.bias(q_pos, k_pos, dtype)
    if kernel == "power":
        # pow's vectorized and scalar loops round differently, and the vmapped score_mod
        # evaluates each pair at another place of another tensor: equal to the dtype's
        # rounding, not bitwise.
        rtol = 1e-12 if dtype == torch.float64 else 1e-6
        assert_close(got, want.expand(2, 4, 3, 7), rtol=rtol, atol=0)
    else:
        assert_close(got, want.expand(2, 4, 3, 7), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(("q_len", "k_len"), [(1, 12), (4, 12)])
def test_kv_cache_rows_equal_full_bias(kernel: str, q_len: int, k_len: int) -> None:
    kerple = KerpleBias(5, kernel=kernel, generator=torch.Generator().manual_seed(1))
    full = kerple.bias(torch.arange(k_len), torch.arange(k_len))
    step = kerple.bias(torch.arange(k_len - q_len, k_len), torch.arange(k_len))
    if kernel == "power":
        # pow's vectorized and scalar loops round differently and the rows sit elsewhere in
        # a smaller tensor (other k_len differ by an ulp with AVX512 kernels): equal to
        # float32 rounding, not bitwise.
        assert_close(step, full[:, k_len - q_len :], rtol=1e-6, atol=0)
    else:
        assert_close(step, full[:, k_len - q_len :], rtol=0, atol=0)


def test_batched_positions_broadcast() -> None:
    kerple = KerpleBias(3, generator=torch.Generator().manual_seed(2))
    q_pos = torch.tensor([[5, 6], [0, 1], [2.5, 3.5]])
    k_pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6.0]])  # batch of 1 broadcasts
    bias = kerple.bias(q_pos, k_pos)
    assert bias.shape == (3, 3, 2, 7)
    for b in range(3):
        assert_close(bias[b], kerple.bias(q_pos[b], k_pos[0]), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", KERNELS)
def test_dtypes(kernel: str) -> None:
    pos = torch.arange(6)
    kerple = KerpleBias(4, kernel=kernel, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        float32 = kerple.bias(pos, pos)
        assert float32.dtype == torch.float32
        # Half precision: computed in float32, rounded once.
        assert_close(
            kerple.bias(pos, pos, torch.bfloat16), float32.to(torch.bfloat16), rtol=0, atol=0
        )
        # bf16 parameters are read as they are (rounded), the bias still computed in float32.
        r1, r2 = kerple.r1.to(torch.bfloat16).double(), kerple.r2.to(torch.bfloat16).double()
        kerple.to(torch.bfloat16)
        assert kerple.r1.dtype == torch.bfloat16
        got = kerple.bias(pos, pos, torch.float32)
    want = direct_formula(r1.tolist(), r2.tolist(), pos.tolist(), pos.tolist(), kernel)
    assert_close(got, want.float(), rtol=1e-6, atol=1e-7)
    assert KerpleBias(2, dtype=torch.float64).bias(pos, pos).dtype == torch.float64


def test_one_module_for_all_layers_and_its_state() -> None:
    assert KerpleBias.shared_across_layers is True
    kerple = KerpleBias(3, kernel="power")
    assert set(kerple.state_dict()) == {"r1", "r2"}
    assert "kernel='power'" in repr(kerple)
    meta = KerpleBias(3, device="meta")  # meta-device init works
    assert meta.r1.device.type == "meta"


@pytest.mark.parametrize("kernel", KERNELS)
def test_attention_uses_the_bias_and_chunked_matches_sdpa(kernel: str) -> None:
    kerple = KerpleBias(
        2, kernel=kernel, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    generator = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, 10, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    pos = torch.arange(10)
    scores = q @ k.transpose(-1, -2) / 2.0 + kerple.bias(pos, pos)
    scores = scores.masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    manual = scores.softmax(-1) @ v
    sdpa = attend(q, k, v, pos=kerple, causal=True)
    assert_close(sdpa, manual)
    (sdpa * pos.double()[:, None]).sum().backward()
    grads = [kerple.r1.grad.clone(), kerple.r2.grad.clone()]  # type: ignore[union-attr]
    kerple.zero_grad()
    chunked = attend(q, k, v, pos=kerple, causal=True, backend=Backend("chunked", block_size=4))
    (chunked * pos.double()[:, None]).sum().backward()
    assert_close(chunked, sdpa)
    assert_close([kerple.r1.grad, kerple.r2.grad], grads)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_heads": 0}, "num_heads"),
        ({"num_heads": 2.0}, "num_heads"),
        ({"num_heads": 2, "kernel": "gaussian"}, "kernel"),
        ({"num_heads": 2, "eps": 0.0}, "eps"),
        ({"num_heads": 2, "eps": -1e-2}, "eps"),
        ({"num_heads": 2, "eps": float("nan")}, "eps"),
        ({"num_heads": 2, "kernel": "power", "eps": 2.0}, "eps"),
        ({"num_heads": 2, "dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        KerpleBias(**kwargs)


def test_bad_functional_kernel() -> None:
    with pytest.raises(ValueError, match="kernel"):
        kerple_bias(torch.ones(1), torch.ones(1), torch.arange(2), torch.arange(2), kernel="exp")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.skipif(not flex_available(), reason="torch has no FlexAttention")
@pytest.mark.parametrize("kernel", KERNELS)
def test_compiled_flex_equals_sdpa(kernel: str) -> None:
    torch._dynamo.reset()
    kerple = KerpleBias(4, kernel=kernel, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 16, generator=generator) for _ in range(3))
    with torch.no_grad():  # FlexAttention on the CPU is forward only
        got = attend(q, k, v, pos=kerple, causal=True, backend=Backend("flex"))
        want = attend(q, k, v, pos=kerple, causal=True, backend="sdpa")
    assert_close(got, want, rtol=1e-5, atol=1e-5)
