"""L-STEP's learnable encoding: Eqs. 1-2 and the update against float64 evaluations of the
formulas, the reference's layout, properties, gradients, bad input."""

from __future__ import annotations

import cmath
import math

import pytest
import torch
from torch.testing import assert_close

from posenc.graph.lstep import (
    LSTEPEncoding,
    aggregate_events,
    initial_history,
    lstep_approximate,
    lstep_filter,
    push_history,
    time_encoding,
)


def make_encoding(dim: int, history_len: int, time_dim: int = 3, seed: int = 0) -> LSTEPEncoding:
    """An encoding in float64 with a nonzero imaginary filter part (the init's is zero)."""
    generator = torch.Generator().manual_seed(seed)
    enc = LSTEPEncoding(dim, history_len, time_dim, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        enc.filter_imag.copy_(
            torch.randn(dim, history_len, generator=generator, dtype=torch.float64)
        )
    return enc


def direct_approximation(
    history: list[list[list[float]]],
    real: list[list[float]],
    imag: list[list[float]],
    w: list[float],
) -> torch.Tensor:
    """Eqs. 1-2 written out: X_k = Σ_j x_j e^{-2πi jk/L}; x̃_j = Re (1/L) Σ_k W_k X_k e^{2πi jk/L};
    ep = Σ_j w_j x̃_j, per node and channel, in float64."""
    out = []
    for steps in history:
        length, dim = len(steps), len(steps[0])
        row = []
        for c in range(dim):
            spectrum = [
                sum(steps[j][c] * cmath.exp(-2j * math.pi * j * k / length) for j in range(length))
                for k in range(length)
            ]
            filtered = [
                sum(
                    complex(real[c][k], imag[c][k])
                    * spectrum[k]
                    * cmath.exp(2j * math.pi * j * k / length)
                    for k in range(length)
                ).real
                / length
                for j in range(length)
            ]
            row.append(sum(w[j] * filtered[j] for j in range(length)))
        out.append(row)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("history_len", [1, 2, 5, 8])
def test_approximation_matches_direct_dft(history_len: int) -> None:
    enc = make_encoding(3, history_len, seed=history_len)
    history = torch.randn(4, history_len, 3, generator=torch.Generator().manual_seed(1)).double()
    want = direct_approximation(
        history.tolist(),
        enc.filter_real.tolist(),
        enc.filter_imag.tolist(),
        enc.sum_weight.tolist(),
    )
    assert_close(enc(history), want, rtol=1e-12, atol=1e-12)


def test_matches_the_reference_layout() -> None:
    # The reference keeps a (N, T, d_P) stack of whole-graph snapshots, truncates it to the
    # last L, takes fftn over dim 1, multiplies by fft_filter.weight of shape (L, d_P)
    # (nn.Linear(d_P, L) cast to complex), ifftn, casts to real, and applies
    # fft_agg = nn.Linear(L, 1, bias=False) over the steps. With T >= L there is no padding.
    length, dim, total = 4, 5, 7
    enc = make_encoding(dim, length)
    snapshots = torch.randn(6, total, dim, generator=torch.Generator().manual_seed(2)).double()
    recent = snapshots[:, -length:, :]
    weight = torch.complex(enc.filter_real, enc.filter_imag).detach().T  # (L, d_P)
    filtered = torch.fft.ifftn(weight.unsqueeze(0) * torch.fft.fftn(recent, dim=1), dim=1).real
    reference = filtered.permute(0, 2, 1) @ enc.sum_weight.detach()  # Linear(L, 1) over steps
    assert_close(enc(recent), reference, rtol=1e-13, atol=1e-13)


def test_all_ones_filter_is_the_identity() -> None:
    length, dim = 6, 4
    history = torch.randn(3, length, dim, dtype=torch.float64)
    ones = torch.ones(dim, length, dtype=torch.complex128)
    assert_close(lstep_filter(history, ones), history, rtol=1e-14, atol=1e-14)
    last = torch.zeros(length, dtype=torch.float64)
    last[-1] = 1.0
    assert_close(lstep_approximate(history, ones, last), history[:, -1], rtol=0, atol=1e-14)
    uniform = torch.full((length,), 1.0 / length, dtype=torch.float64)
    assert_close(lstep_approximate(history, ones, uniform), history.mean(1), rtol=0, atol=1e-14)


def test_single_step_scales_each_channel() -> None:
    enc = make_encoding(5, 1)
    history = torch.randn(4, 1, 5, dtype=torch.float64)
    want = history[:, 0] * enc.filter_real[:, 0].detach() * enc.sum_weight.detach()[0]
    assert_close(enc(history), want, rtol=1e-14, atol=1e-14)


def test_constant_history_reads_the_zero_frequency() -> None:
    # A node whose encoding never changed (e.g. the initial history): only the DC bin is
    # nonzero, so ep = (Σ w) Re(W[:, 0]) p.
    enc = make_encoding(4, 5)
    p = torch.randn(3, 4, dtype=torch.float64)
    want = enc.sum_weight.detach().sum() * enc.filter_real[:, 0].detach() * p
    assert_close(enc(initial_history(p, 5)), want, rtol=1e-13, atol=1e-13)


def test_hermitian_filter_equals_rfft_filter() -> None:
    # With W[:, k] = conj(W[:, -k]) the inverse DFT is real: the full DFT and rfft/irfft agree.
    length, dim = 6, 3
    generator = torch.Generator().manual_seed(4)
    half = torch.randn(dim, length // 2 + 1, 2, generator=generator, dtype=torch.float64)
    half = torch.view_as_complex(half).clone()
    half[:, 0] = half[:, 0].real
    half[:, -1] = half[:, -1].real  # the Nyquist bin of an even length
    full = torch.cat([half, half[:, 1:-1].flip(-1).conj()], dim=-1)
    history = torch.randn(2, length, dim, generator=generator, dtype=torch.float64)
    spectrum = torch.fft.rfft(history, dim=-2) * half.T
    assert_close(lstep_filter(history, full), torch.fft.irfft(spectrum, n=length, dim=-2))


def test_linear_in_the_history() -> None:
    enc = make_encoding(3, 4)
    x, y = torch.randn(2, 5, 4, 3, dtype=torch.float64)
    assert_close(enc(2.0 * x - 0.5 * y), 2.0 * enc(x) - 0.5 * enc(y))


def direct_update(
    enc: LSTEPEncoding, p: torch.Tensor, events: list[tuple[int, int, float]], now: float
) -> dict[int, torch.Tensor]:
    """Eq. (update) per node: m_u = Σ_{events on u} [p_other ‖ cos((now - t_e) ω)];
    p_u + tanh(W_s p_u + b_s + W_o ReLU(W_i m_u + b_i) + b_o), in float64."""
    block, d_t = enc.update_block, enc.time_dim
    omega = [10.0 ** (-9.0 * i / (d_t - 1)) if d_t > 1 else 1.0 for i in range(d_t)]
    messages: dict[int, torch.Tensor] = {}
    for u, v, t in events:
        phase = torch.tensor([math.cos((now - t) * w) for w in omega], dtype=torch.float64)
        for receiver, sender in ((u, v), (v, u)):
            m = torch.cat([p[sender], phase])
            messages[receiver] = messages.get(receiver, torch.zeros_like(m)) + m
    out = {}
    for u, m in messages.items():
        hidden = block.message_out.weight @ torch.relu(
            block.message_in.weight @ m + block.message_in.bias
        )
        inner = block.self_update.weight @ p[u] + block.self_update.bias + hidden
        out[u] = (p[u] + torch.tanh(inner + block.message_out.bias)).detach()
    return out


@pytest.mark.parametrize("time_dim", [1, 4])
def test_update_matches_direct_formula(time_dim: int) -> None:
    enc = make_encoding(3, 2, time_dim=time_dim)
    p = torch.randn(6, 3, dtype=torch.float64)
    events = [(0, 1, 0.5), (2, 1, 1.0), (3, 3, 2.0), (0, 4, 7.25), (4, 0, 7.25)]  # self-loop
    src, dst, times = (torch.tensor(column) for column in zip(*events, strict=True))
    nodes, updated = enc.update(p, src, dst, times, now=9.0)
    want = direct_update(enc, p, events, 9.0)
    assert nodes.tolist() == sorted(want)
    assert_close(updated, torch.stack([want[u] for u in sorted(want)]), rtol=1e-13, atol=1e-13)


def test_time_encoding_frequencies() -> None:
    delta = torch.tensor([[0.0, 1.5], [1e6, 3.0]], dtype=torch.float64)
    got = time_encoding(delta, 5, torch.float64)
    omega = torch.tensor([10.0 ** (-9 * i / 4) for i in range(5)], dtype=torch.float64)
    assert_close(got, torch.cos(delta.unsqueeze(-1) * omega), rtol=0, atol=1e-12)
    assert_close(time_encoding(delta, 1, torch.float64), torch.cos(delta).unsqueeze(-1))
    assert time_encoding(delta, 3).dtype == torch.float32


def test_aggregate_events_sums_both_directions() -> None:
    p = torch.arange(8.0).view(4, 2)
    phi = torch.tensor([[10.0], [20.0]])
    nodes, summed = aggregate_events(p, torch.tensor([0, 2]), torch.tensor([2, 2]), phi)
    assert nodes.tolist() == [0, 2]
    # node 0 gets p[2] with phi 10; node 2 gets p[0] (10) and p[2] twice (its self-loop, 20).
    assert_close(summed, torch.tensor([[4.0, 5.0, 10.0], [0 + 4 + 4, 1 + 5 + 5, 10 + 40]]))


def test_permuting_nodes_permutes_outputs() -> None:
    enc = make_encoding(3, 4)
    history = torch.randn(5, 4, 3, dtype=torch.float64)
    perm = torch.tensor([3, 0, 4, 1, 2])  # new id i is old node perm[i]
    # The FFT and the weighted sum see each node at another place of the batch, which
    # another CPU's kernels may round differently: equal to float64 rounding, not bitwise.
    assert_close(enc(history[perm]), enc(history)[perm], rtol=1e-12, atol=1e-14)
    p = enc(history)
    src, dst, times = torch.tensor([0, 1, 4]), torch.tensor([2, 2, 3]), torch.tensor([1.0, 2, 3])
    nodes, updated = enc.update(p, src, dst, times, now=3.0)
    inverse = torch.argsort(perm)  # old id -> new id
    new_nodes, new_updated = enc.update(p[perm], inverse[src], inverse[dst], times, now=3.0)
    assert_close(new_updated, updated[torch.argsort(inverse[nodes])])
    assert new_nodes.tolist() == sorted(inverse[nodes].tolist())


def test_gradcheck_filter_and_sum_weight() -> None:
    enc = make_encoding(2, 3)
    history = torch.randn(2, 3, 2, dtype=torch.float64, requires_grad=True)
    params = {name: p.detach().clone().requires_grad_() for name, p in enc.named_parameters()}
    names = ("filter_real", "filter_imag", "sum_weight")

    def fn(history: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        values = {**params, **dict(zip(names, tensors, strict=True))}
        return torch.func.functional_call(enc, values, (history,))

    assert torch.autograd.gradcheck(fn, (history, *(params[n] for n in names)))


def test_gradcheck_update() -> None:
    enc = make_encoding(2, 2, time_dim=2)
    names = [name for name, _ in enc.update_block.named_parameters()]
    params = [p.detach().clone().requires_grad_() for p in enc.update_block.parameters()]
    p = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    src, dst, times = torch.tensor([0, 1, 1]), torch.tensor([1, 2, 3]), torch.tensor([0.0, 1, 2])

    class Update(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.enc = enc

        def forward(self, p: torch.Tensor) -> torch.Tensor:
            return self.enc.update(p, src, dst, times, now=2.5)[1]

    update = Update()

    def fn(p: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        values = {f"enc.update_block.{n}": t for n, t in zip(names, tensors, strict=True)}
        return torch.func.functional_call(update, values, (p,), strict=False)

    assert torch.autograd.gradcheck(fn, (p, *params))


def test_history_helpers() -> None:
    p0 = torch.randn(3, 2)
    history = initial_history(p0, 4)
    assert history.shape == (3, 4, 2)
    assert_close(history, p0.unsqueeze(1).expand(3, 4, 2), rtol=0, atol=0)
    new = torch.randn(3, 2)
    pushed = push_history(history, new)
    assert_close(pushed[:, :-1], history[:, 1:], rtol=0, atol=0)
    assert_close(pushed[:, -1], new, rtol=0, atol=0)
    one = push_history(history, new[:1], torch.tensor([2]))
    assert_close(one[:2], history[:2], rtol=0, atol=0)
    assert_close(one[2], torch.cat([history[2, 1:], new[:1]]), rtol=0, atol=0)
    history[0, 0, 0] = 99.0  # the copies are independent
    assert float(history[0, 1, 0]) != 99.0


def test_dtypes_and_devices() -> None:
    enc64 = make_encoding(3, 4)
    history = torch.randn(2, 4, 3, dtype=torch.float64)
    enc32 = LSTEPEncoding(3, 4, 3)
    enc32.load_state_dict(enc64.state_dict())  # rounded to float32
    assert enc32.filter_real.dtype == torch.float32
    got = enc32(history.float())
    assert got.dtype == torch.float32
    assert_close(got.double(), enc64(history), rtol=1e-5, atol=1e-5)
    half = enc32(history.to(torch.bfloat16))  # filtered in float32, rounded once
    assert half.dtype == torch.bfloat16
    assert_close(half, enc32(history.to(torch.bfloat16).float()).to(torch.bfloat16), rtol=0, atol=0)
    assert enc32.to(torch.float64).filter_imag.dtype == torch.float64  # keeps its imaginary part
    meta = LSTEPEncoding(3, 4, 3, device="meta")
    assert meta.filter_real.device.type == "meta"
    assert "history_len=4" in repr(meta)


def test_init_is_the_reference_draw() -> None:
    enc = LSTEPEncoding(64, 50, 3, generator=torch.Generator().manual_seed(0))
    real, imag, weights = (p.detach() for p in (enc.filter_real, enc.filter_imag, enc.sum_weight))
    assert float(imag.abs().max()) == 0.0  # nn.Linear cast to complex64
    assert 0.9 / math.sqrt(64) < float(real.abs().max()) <= 1 / math.sqrt(64)  # U(±1/√d_P)
    assert 0.9 / math.sqrt(50) < float(weights.abs().max()) <= 1 / math.sqrt(50)  # U(±1/√L)
    again = LSTEPEncoding(64, 50, 3, generator=torch.Generator().manual_seed(0))
    assert_close(again.state_dict(), enc.state_dict(), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"dim": 0, "history_len": 2, "time_dim": 2}, "dim"),
        ({"dim": 2, "history_len": 0, "time_dim": 2}, "history_len"),
        ({"dim": 2, "history_len": 2.0, "time_dim": 2}, "history_len"),
        ({"dim": 2, "history_len": 2, "time_dim": 0}, "time_dim"),
        ({"dim": 2, "history_len": 2, "time_dim": 2, "dtype": torch.int64}, "dtype"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        LSTEPEncoding(**kwargs)


@pytest.mark.parametrize(
    "history",
    [torch.zeros(2, 3, 2), torch.zeros(2, 2, 3), torch.zeros(2), torch.zeros(2, 2, 2).long()],
)
def test_bad_history(history: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="history"):
        LSTEPEncoding(2, 2, 2)(history)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"src": torch.tensor([0.0, 1.0])}, "src"),  # non-integer ids
        ({"src": torch.tensor([True, False])}, "src"),
        ({"dst": torch.tensor([1, 4])}, "dst"),  # out of range
        ({"dst": torch.tensor([1, -1])}, "dst"),
        ({"dst": torch.tensor([1, 2, 3])}, "dst"),  # length mismatch
        ({"times": torch.tensor([2.0, 1.0])}, "times"),  # out of order
        ({"times": torch.tensor([0.0, float("nan")])}, "times"),
        ({"times": torch.tensor([1.0])}, "times"),
        ({"now": 0.5}, "now"),  # before the last event
        ({"encodings": torch.zeros(4, 3)}, "encodings"),  # dims mismatched
        ({"encodings": torch.zeros(4, 2).long()}, "encodings"),
    ],
)
def test_bad_update_arguments(change: dict, name: str) -> None:
    args = {
        "encodings": torch.zeros(4, 2),
        "src": torch.tensor([0, 1]),
        "dst": torch.tensor([1, 2]),
        "times": torch.tensor([0.0, 1.0]),
        "now": 1.0,
    }
    with pytest.raises(ValueError, match=name):
        LSTEPEncoding(2, 2, 2).update(**(args | change))


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((torch.zeros(3), 2), "initial_encodings"),
        ((torch.zeros(3, 2).long(), 2), "initial_encodings"),
        ((torch.zeros(3, 2), 0), "history_len"),
    ],
)
def test_bad_initial_history(args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        initial_history(*args)
