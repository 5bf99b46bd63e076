r"""L-STEP: a node's positional encoding at time t learned from its L most recent encodings.

Tieu et al., ICML 2025, "Learnable Spatial-Temporal Positional Encoding for Link Prediction",
https://arxiv.org/abs/2506.08309 (reference: https://github.com/kthrn22/L-STEP). A node ``u``
keeps its ``L`` most recent encodings ``p_u^{t'_1} .. p_u^{t'_L}`` (oldest first). At time
``t`` they are read as a signal over the ``L`` steps: DFT, a learnable complex filter, inverse
DFT (the paper's Eq. 1), then a learned weighted sum over the steps (Eq. 2). Once the links at
``t`` are seen, each node in them is updated from the other endpoints' encodings and the
elapsed times, and the result becomes the newest entry of its history:

.. math::
    \tilde p_u^{t'_j} = \operatorname{Re}\,\mathcal F^{-1}\big(W_{\text{filter}} \odot
        \mathcal F(p_u^{t'_1}, \dots, p_u^{t'_L})\big)_j, \qquad
    ep_u^t = \sum_{j=1}^{L} w_j\, \tilde p_u^{t'_j},

    p_u^t = ep_u^t + \tanh\Big(W_{\text{self}}\, ep_u^t + b + \operatorname{MLP}\big(
        \textstyle\sum_{(u, v, t_e)} [\, ep_v^t \,\|\, \cos((t - t_e)\,\omega) \,]\big)\Big)

with ``F`` the DFT along the ``L`` steps (``F(x)_k = Σ_j x_j e^{-2πi jk/L}``, inverse with
``1/L``), ``W_filter ∈ C^{d_P × L}`` one complex weight per channel and frequency,
``w ∈ R^L`` (the paper's ``W_sum^P``), the MLP ``Linear → ReLU → Linear``, the sum over the
events ``(u, v, t_e)`` that touch ``u`` and ``ω_i = 10^{-9 (i-1)/(d_T-1)}`` DyGLib's fixed
time frequencies. :mod:`posenc.graph.link_prediction` has the link predictor that reads these
encodings; ``docs/graph.md`` says where this follows the paper and where the reference.

Example::

    >>> enc = LSTEPEncoding(8, 4, 6, generator=torch.Generator().manual_seed(0))  # d_P, L, d_T
    >>> history = initial_history(torch.randn(5, 8), history_len=4)  # 5 nodes
    >>> enc(history).shape
    torch.Size([5, 8])
    >>> nodes, updated = enc.update(enc(history), torch.tensor([0, 1]), torch.tensor([2, 2]),
    ...                             torch.tensor([1.0, 3.0]), now=3.0)
    >>> nodes.tolist(), updated.shape
    ([0, 1, 2], torch.Size([3, 8]))
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Literal

import torch
from torch import Tensor, nn

from posenc._validate import (
    check_finite,
    check_floating_dtype,
    check_positive_int,
    validating_values,
)

__all__ = [
    "HistoryUpdate",
    "LSTEPEncoding",
    "PositionUpdate",
    "aggregate_events",
    "initial_history",
    "lstep_approximate",
    "lstep_filter",
    "lstep_pool",
    "push_history",
    "time_encoding",
]

#: How the history grows: ``"every_batch"`` appends every node's encoding at every batch (the
#: reference: its history is a stack of whole-graph snapshots, so ``t'_j`` are the last ``L``
#: batches); ``"involved"`` appends only to the nodes whose encoding was updated (each node's
#: own ``L`` most recent encodings).
HistoryUpdate = Literal["every_batch", "involved"]
HISTORY_UPDATES: tuple[HistoryUpdate, ...] = ("every_batch", "involved")


def check_node_ids(name: str, ids: object, num_nodes: int) -> Tensor:
    """Return ``ids`` as int64 if it is a 1-D integer tensor with values in
    ``[0, num_nodes)``, else raise ``ValueError`` naming ``name``."""
    if not isinstance(ids, Tensor) or ids.dim() != 1:
        got = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a 1-D tensor of node ids; got {got}")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer node ids; got dtype {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise ValueError(
            f"{name} must hold node ids in [0, {num_nodes}); got values in "
            f"[{int(ids.min())}, {int(ids.max())}]"
        )
    return ids.long()


def check_times(name: str, times: object, length: int) -> Tensor:
    """Return ``times`` as float64 if it is a finite, non-decreasing 1-D tensor of ``length``
    entries (events in time order), else raise ``ValueError`` naming ``name``."""
    if not isinstance(times, Tensor) or times.shape != (length,) or times.is_complex():
        got = tuple(times.shape) if isinstance(times, Tensor) else type(times).__name__
        raise ValueError(f"{name} must be a 1-D real tensor of {length} event times; got {got}")
    times = times.to(torch.float64)
    if not bool(torch.isfinite(times).all()):
        raise ValueError(f"{name} must be finite; it contains NaN or inf")
    if length > 1 and bool((times[1:] < times[:-1]).any()):
        raise ValueError(f"{name} must be in time order (non-decreasing)")
    return times


def time_encoding(delta: Tensor, time_dim: int, dtype: torch.dtype | None = None) -> Tensor:
    """DyGLib's fixed time encoding ``cos(Δt ω)``, ``ω_i = 10^{-9 (i-1)/(time_dim-1)}``.

    The reference builds it with ``TimeEncoder(time_dim, parameter_requires_grad=False)``
    (a ``Linear(1, time_dim)`` with these weights and zero bias, never trained). The phases
    are computed in float64 and rounded once.

    Shape: ``delta (...)`` → ``(..., time_dim)`` in ``dtype`` (default float32).
    """
    time_dim = check_positive_int("time_dim", time_dim)
    if not isinstance(delta, Tensor) or delta.is_complex() or delta.dtype == torch.bool:
        got = delta.dtype if isinstance(delta, Tensor) else type(delta).__name__
        raise ValueError(f"delta must be a real tensor of time differences; got {got}")
    check_finite("delta", delta)
    exponents = torch.linspace(0.0, 9.0, time_dim, dtype=torch.float64, device=delta.device)
    phases = delta.to(torch.float64).unsqueeze(-1) * 10.0**-exponents
    return torch.cos(phases).to(dtype or torch.float32)


def check_time(name: str, time: object) -> Tensor:
    """Return ``time`` as a float64 0-d tensor if it is a finite real number (a Python or
    numpy number, or a 0-d real tensor), else raise ``ValueError`` naming ``name``."""
    real = isinstance(time, numbers.Real) and not isinstance(time, bool)
    if isinstance(time, Tensor):
        real = time.dim() == 0 and not time.is_complex() and time.dtype != torch.bool
    if not real:
        raise ValueError(f"{name} must be a finite real number or 0-d tensor; got {time!r}")
    time_t = torch.as_tensor(time, dtype=torch.float64)
    if validating_values() and not bool(torch.isfinite(time_t)):
        raise ValueError(f"{name} must be a finite real number; got {float(time_t)}")
    return time_t


def _compute_dtype(*dtypes: torch.dtype) -> torch.dtype:
    """At least float32: half-precision inputs are filtered in float32 (torch.fft's CPU
    kernels take no half) and rounded once."""
    compute = torch.float32
    for dtype in dtypes:
        compute = torch.promote_types(compute, dtype)
    return compute


def lstep_filter(history: Tensor, filter_weight: Tensor) -> Tensor:
    """Eq. 1: ``Re F⁻¹(W_filter ⊙ F(history))`` with the DFT along the ``L`` steps.

    A full complex DFT (``torch.fft.fft``), as the reference and the paper's
    ``W_filter ∈ C^{d_P×L}``: every frequency has its own weight and the real part is kept.
    This equals an ``rfft``/``irfft`` filter only for a Hermitian-symmetric ``W_filter``
    (``W[:, k] = conj(W[:, -k])``).

    Args:
        history: ``(..., L, dim)`` real encodings, oldest first.
        filter_weight: ``(dim, L)`` complex (the paper's layout).

    Returns:
        ``(..., L, dim)``, computed in at least float32 and returned in ``history.dtype``.
    """
    compute = _compute_dtype(history.dtype)
    complex_dtype = torch.complex128 if compute == torch.float64 else torch.complex64
    spectrum = torch.fft.fft(history.to(compute), dim=-2)  # (..., L, dim)
    weight = filter_weight.to(complex_dtype).transpose(0, 1)  # (L, dim)
    return torch.fft.ifft(spectrum * weight, dim=-2).real.to(history.dtype)


def lstep_pool(filtered: Tensor, sum_weight: Tensor) -> Tensor:
    """Eq. 2: ``ep = Σ_j w_j p̃_j``, the learned weighted sum over the ``L`` steps.

    Shape: ``filtered (..., L, dim)``, ``sum_weight (L,)`` → ``(..., dim)``.
    """
    return torch.matmul(sum_weight.to(filtered.dtype), filtered)


def lstep_approximate(history: Tensor, filter_weight: Tensor, sum_weight: Tensor) -> Tensor:
    """Eqs. 1–2: a node's encoding at time ``t`` from its ``L`` most recent ones.

    Shape: ``history (..., L, dim)`` → ``(..., dim)``; computed in at least float32, rounded
    once to ``history.dtype``.
    """
    compute = _compute_dtype(history.dtype, sum_weight.dtype)
    filtered = lstep_filter(history.to(compute), filter_weight)
    return lstep_pool(filtered, sum_weight.to(compute)).to(history.dtype)


def aggregate_events(
    encodings: Tensor, src: Tensor, dst: Tensor, time_features: Tensor
) -> tuple[Tensor, Tensor]:
    """The nodes touched by the events and, for each, ``Σ [encodings[other] ‖ Φ(t - t_e)]``
    over its events (an event ``(u, v)`` sends ``v``'s encoding to ``u`` and ``u``'s to
    ``v``; a self-loop sends its node's encoding to itself twice).

    Shape: ``encodings (N, d)``, ``src, dst (E,)``, ``time_features (E, d_T)`` →
    ``nodes (U,)`` sorted, ``(U, d + d_T)``.
    """
    receivers = torch.cat([src, dst])
    messages = torch.cat([encodings[torch.cat([dst, src])], time_features.repeat(2, 1)], -1)
    nodes, slot = torch.unique(receivers, return_inverse=True)
    summed = messages.new_zeros(len(nodes), messages.shape[-1]).index_add(0, slot, messages)
    return nodes, summed


def initial_history(initial_encodings: Tensor, history_len: int) -> Tensor:
    """Every node's history as ``history_len`` copies of its initial encoding.

    A node with fewer than ``L`` real entries reads its initial encoding in the older slots
    (the reference zero-pads after the real entries and masks; see ``docs/graph.md``).

    Shape: ``(N, dim)`` → ``(N, history_len, dim)``.
    """
    history_len = check_positive_int("history_len", history_len)
    if not isinstance(initial_encodings, Tensor) or initial_encodings.dim() != 2:
        raise ValueError("initial_encodings must be a (num_nodes, dim) tensor")
    if not initial_encodings.is_floating_point():
        raise ValueError(f"initial_encodings must be floating; got {initial_encodings.dtype}")
    check_finite("initial_encodings", initial_encodings)
    n, dim = initial_encodings.shape
    return initial_encodings.unsqueeze(1).expand(n, history_len, dim).clone()


def push_history(history: Tensor, encodings: Tensor, nodes: Tensor | None = None) -> Tensor:
    """Append ``encodings`` as the newest entry and drop the oldest (out of place).

    ``nodes=None``: every node gets an entry (``encodings`` is ``(N, dim)``); else only
    ``nodes`` (``encodings`` is ``(len(nodes), dim)``), the others keep their history.
    Non-finite ``encodings`` raise ``ValueError``: a NaN written here would be read later.
    """
    check_finite("encodings", encodings)
    if nodes is None:
        return torch.cat([history[:, 1:], encodings.unsqueeze(1).to(history.dtype)], dim=1)
    rolled = torch.cat([history[nodes, 1:], encodings.unsqueeze(1).to(history.dtype)], dim=1)
    return history.index_put((nodes,), rolled)


def _uniform_linear(linear: nn.Linear, generator: torch.Generator | None) -> None:
    """``nn.Linear``'s default initialization, ``U(±1/√fan_in)``, drawn from ``generator``."""
    bound = 1.0 / math.sqrt(linear.in_features)
    nn.init.uniform_(linear.weight, -bound, bound, generator=generator)
    if linear.bias is not None:
        nn.init.uniform_(linear.bias, -bound, bound, generator=generator)


class PositionUpdate(nn.Module):
    """The residual update ``p + tanh(W p + b + MLP(m))`` of an encoding ``p`` from a
    message sum ``m`` (its neighbours' encodings and time features).

    The same form updates the stored encodings (:meth:`LSTEPEncoding.update`, the reference's
    ``update_pe``) and reads the positional part of a node's representation
    (:class:`~posenc.graph.link_prediction.NodeLinkPositionalEncoder`, the reference's
    ``compute_neighborhood_pe``), each with its own parameters.

    Shape: ``encodings (..., dim)``, ``messages (..., dim + time_dim)`` → ``(..., dim)``.
    """

    def __init__(
        self,
        dim: int,
        time_dim: int,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kwargs: dict[str, Any] = {"device": device, "dtype": dtype}
        self.self_update = nn.Linear(dim, dim, **kwargs)
        self.message_in = nn.Linear(dim + time_dim, dim, **kwargs)
        self.message_out = nn.Linear(dim, dim, **kwargs)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        for linear in (self.self_update, self.message_in, self.message_out):
            _uniform_linear(linear, generator)

    def forward(self, encodings: Tensor, messages: Tensor) -> Tensor:
        hidden = self.message_out(torch.relu(self.message_in(messages)))
        return encodings + torch.tanh(self.self_update(encodings) + hidden)


class LSTEPEncoding(nn.Module):
    """L-STEP's learnable positional encoding: Eqs. 1–2 read it, :meth:`update` writes it.

    See the module docstring for the formulas. The initialization is the reference's:
    ``W_filter``'s real part ``U(±1/√dim)`` (``nn.Linear(dim, L)`` cast to complex64, so its
    imaginary part starts at 0), ``w ~ U(±1/√L)`` (``nn.Linear(L, 1, bias=False)``) and the
    update's layers as ``nn.Linear``. The complex filter is stored as two real parameters,
    ``filter_real`` and ``filter_imag``, so that ``module.to(dtype)`` keeps its imaginary part.

    Args:
        dim: encoding size ``d_P`` (≥ 1).
        history_len: ``L``, the number of past encodings read (≥ 1; the reference's
            ``num_fft_batches``, 100 by default there).
        time_dim: size of the time encoding in the update (≥ 1).
        generator: optional ``torch.Generator`` for the initialization.
        device, dtype: of the parameters.

    Shape:
        ``forward(history)``: ``(..., L, dim)`` → ``(..., dim)``.
    """

    def __init__(
        self,
        dim: int,
        history_len: int,
        time_dim: int,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.history_len = check_positive_int("history_len", history_len)
        self.time_dim = check_positive_int("time_dim", time_dim)
        check_floating_dtype("dtype", dtype)
        kwargs: dict[str, Any] = {"device": device, "dtype": dtype}
        self.filter_real = nn.Parameter(torch.empty(dim, history_len, **kwargs))
        self.filter_imag = nn.Parameter(torch.empty(dim, history_len, **kwargs))
        self.sum_weight = nn.Parameter(torch.empty(history_len, **kwargs))
        self.update_block = PositionUpdate(dim, time_dim, device=device, dtype=dtype)
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        draw = generator.device if generator is not None else "cpu"
        filter_bound, sum_bound = 1.0 / math.sqrt(self.dim), 1.0 / math.sqrt(self.history_len)
        real = torch.rand(self.filter_real.shape, generator=generator, device=draw)
        weights = torch.rand(self.history_len, generator=generator, device=draw)
        with torch.no_grad():
            self.filter_real.copy_((2.0 * real - 1.0) * filter_bound)
            self.filter_imag.zero_()
            self.sum_weight.copy_((2.0 * weights - 1.0) * sum_bound)
        self.update_block.reset_parameters(generator)

    @property
    def filter_weight(self) -> Tensor:
        """``W_filter``, ``(dim, L)`` complex (at least complex64)."""
        compute = _compute_dtype(self.filter_real.dtype)
        return torch.complex(self.filter_real.to(compute), self.filter_imag.to(compute))

    def forward(self, history: Tensor) -> Tensor:
        """``ep``: each node's encoding now, from its ``L`` most recent (Eqs. 1–2)."""
        if not isinstance(history, Tensor) or history.dim() < 2:
            raise ValueError("history must be a (..., history_len, dim) tensor")
        if not history.is_floating_point():
            raise ValueError(f"history must be floating; got {history.dtype}")
        if tuple(history.shape[-2:]) != (self.history_len, self.dim):
            raise ValueError(
                f"history must end in (history_len, dim) = ({self.history_len}, {self.dim}); "
                f"got {tuple(history.shape)}"
            )
        check_finite("history", history)
        return lstep_approximate(history, self.filter_weight, self.sum_weight)

    def update(
        self, encodings: Tensor, src: Tensor, dst: Tensor, times: Tensor, now: float | Tensor
    ) -> tuple[Tensor, Tensor]:
        """The new encodings ``p_u^t`` of the nodes in the events ``(src, dst, times)``.

        Args:
            encodings: ``(N, dim)``, the encodings read at ``now`` (``ep`` for these nodes).
            src, dst: ``(E,)`` integer node ids in ``[0, N)``.
            times: ``(E,)`` event times in order, none after ``now``.
            now: the time of the update (the reference: the batch's last event time).

        Returns:
            ``nodes (U,)`` (sorted, unique) and their new encodings ``(U, dim)``.
        """
        if not isinstance(encodings, Tensor) or encodings.dim() != 2:
            raise ValueError("encodings must be a (num_nodes, dim) tensor")
        if encodings.shape[1] != self.dim or not encodings.is_floating_point():
            raise ValueError(
                f"encodings must be floating with dim = {self.dim} columns; got "
                f"{tuple(encodings.shape)} {encodings.dtype}"
            )
        check_finite("encodings", encodings)
        num_nodes = encodings.shape[0]
        src = check_node_ids("src", src, num_nodes)
        dst = check_node_ids("dst", dst, num_nodes)
        if dst.shape != src.shape:
            raise ValueError(f"dst must have the length of src ({len(src)}); got {len(dst)}")
        times = check_times("times", times, len(src))
        now_t = check_time("now", now).to(times.device)
        if len(times) and bool(now_t < times[-1]):
            raise ValueError(f"now must not precede the events; got {float(now_t)} < {times[-1]}")
        time_features = time_encoding(now_t - times, self.time_dim, encodings.dtype)
        nodes, messages = aggregate_events(encodings, src, dst, time_features)
        return nodes, self.update_block(encodings[nodes], messages)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, history_len={self.history_len}, time_dim={self.time_dim}"
