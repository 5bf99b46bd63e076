"""CARoPE: rotary phases accumulated from input-dependent, head-specific frequencies.

Context-aware RoPE (Veisi et al. 2025, https://arxiv.org/abs/2507.23083) replaces RoPE's
fixed base frequency ``θ = base^{−2/d}`` by a bounded transform of each token's embedding,
one per head, and accumulates the phases over the tokens:

.. math::

    f_h(x_t) = \\frac{1}{\\operatorname{softplus}(w_h^⊤ x_t + b_h) + 1} \\in (0, 1), \\qquad
    φ_{h,i}(n) = \\sum_{t ≤ n} f_h(x_t)^{\\,i}, \\quad i = 0 … d/2 − 1,

and pair ``i`` of a query or key of head ``h`` at token ``n`` is rotated by ``φ_{h,i}(n)``
(RoPE's pair rotation, in the layout's channels). With a constant transform ``f ≡ θ`` the
phase is ``(n + 1) θ^i``: RoPE at positions ``n + 1`` (the paper counts tokens from 1), so
every logit equals RoPE's. As a rotation accumulated between key and query, the logit reads
``φ(i) − φ(j) = Σ_{j<t≤i} f(x_t)^i`` (GRAPE's contextual multiplicative case, docs/rotary.md).

The phases continue across calls (``previous``: the last cached token's phases), so decoding
with a KV cache of rotated keys equals a full forward. The paper's ``W`` has no bias;
``bias=True`` adds one (the constant transform above needs it).

Place: :class:`~posenc.encoding.TokenPhaseEncoding` (the rules of heads, padding and
packed documents are there): :class:`~posenc.attention.Attention` rotates q and the new k
by the phases of its input on the ``sdpa``, ``chunked``, ``flex`` and ``auto`` backends, its
KV cache keeps the rotated keys and their phases, and :class:`~posenc.models.DecoderLM`
takes it as ``pos="carope"`` (one transform per layer). Under grouped-query attention the
transforms are the key heads' (``num_heads`` = the layer's ``num_kv_heads``), each shared by
its group of query heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_in_choices,
    check_layer_input,
    check_positive_int,
)
from posenc.encoding.token_phases import TokenPhaseEncoding
from posenc.rotary.grape import grape_rotate
from posenc.rotary.layouts import LAYOUTS, Layout

__all__ = ["ContextAwareRoPE", "carope_phases", "carope_rates"]


def carope_rates(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``f_h(x_t) = 1 / (softplus(w_hᵀ x_t + b_h) + 1)``, ``(batch, heads, seq)``.

    Computed in float32 (float64 for float64 ``x``): they are raised to powers and summed.

    Args:
        x: the layer's input ``(batch, seq, dim)``.
        weight: ``(heads, dim)``; bias: ``(heads,)`` or None.
    """
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    b = None if bias is None else bias.to(cdt)
    logits = F.linear(x.to(cdt), weight.to(cdt), b)  # (batch, seq, heads)
    return (1.0 / (F.softplus(logits) + 1.0)).transpose(1, 2)


def carope_phases(
    rates: Tensor,
    num_pairs: int,
    previous: Tensor | None = None,
    real: Tensor | None = None,
    starts: Tensor | None = None,
) -> Tensor:
    """``φ_{h,i}(n) = φ_prev + Σ_{t ≤ n} f_h(x_t)^i`` in float64, ``(batch, heads, seq, pairs)``.

    With ``starts``, the sum of a token runs from the latest document start at or before it
    (``φ_prev`` only when there is none in this call).

    Args:
        rates: ``(batch, heads, seq)`` from :func:`carope_rates`.
        num_pairs: ``d / 2``.
        previous: phases of the last token before these ``(batch, heads, 1, pairs)``, or None.
        real: ``(batch, seq)`` bool, False for padding tokens (they add no phase), or None.
        starts: ``(batch | 1, seq)`` bool, True where a document starts (the phases restart
            there), or None.
    """
    exponents = torch.arange(num_pairs, device=rates.device, dtype=torch.float64)
    powers = rates.to(torch.float64)[..., None] ** exponents  # (batch, heads, seq, pairs)
    if real is not None:
        powers = powers.masked_fill(~real[:, None, :, None], 0.0)
    phases = powers.cumsum(dim=-2)
    if previous is not None:
        phases = phases + previous.to(torch.float64)
    if starts is None:
        return phases
    # each token minus the phase just before its document's start (the exclusive sum there)
    first = torch.zeros_like(phases[..., :1, :]) if previous is None else previous
    before = torch.cat((first.to(phases).expand_as(phases[..., :1, :]), phases[..., :-1, :]), -2)
    seq = rates.shape[-1]
    index = torch.arange(seq, device=rates.device)
    latest = torch.where(starts, index, -1).cummax(dim=-1).values  # (batch | 1, seq)
    gather = latest.clamp(min=0)[:, None, :, None].expand(phases.shape)
    offset = before.gather(-2, gather).masked_fill((latest < 0)[:, None, :, None], 0.0)
    return phases - offset


class ContextAwareRoPE(TokenPhaseEncoding):
    """CARoPE: q and k rotated by phases accumulated from their tokens' own frequencies.

    .. math::

        f_h(x_t) = (\\operatorname{softplus}(w_h^⊤ x_t + b_h) + 1)^{-1}, \\quad
        φ_{h,i}(n) = \\sum_{t ≤ n} f_h(x_t)^i, \\quad q_n' = R(φ_h(n)) q_n, \\
        k_n' = R(φ_h(n)) k_n

    Paper: https://arxiv.org/abs/2507.23083 (no reference code was published; the tests
    check the formula in float64, the reduction to :class:`~posenc.rotary.RotaryEmbedding`
    for a constant transform, and cached decoding against a full forward).

    Args:
        dim: the width of the layer input the frequencies read.
        num_heads: heads (one transform each).
        head_dim: channels per head (even; all rotated).
        layout: ``"half"`` or ``"interleaved"`` pairs, as RoPE.
        bias: learn a bias ``b_h`` too (the paper's transform has none).
        device, dtype: of the parameters.

    Shape:
        ``forward(q, k, x)``: q, k ``(batch, num_heads, seq, head_dim)``, x ``(batch, seq,
        dim)`` → q and k rotated (self-attention of one sequence from its start).

    Example::

        >>> carope = ContextAwareRoPE(dim=16, num_heads=2, head_dim=8)
        >>> x, q, k = torch.randn(1, 5, 16), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
        >>> q2, k2 = carope(q, k, x)
        >>> q2.shape
        torch.Size([1, 2, 5, 8])
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        head_dim: int,
        *,
        layout: Layout = "half",
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.dim = check_positive_int("dim", dim)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even (pairs of channels), got {head_dim}")
        check_in_choices("layout", layout, LAYOUTS)
        if not isinstance(bias, bool):
            raise ValueError(f"bias must be a bool, got {bias!r}")
        check_floating_dtype("dtype", dtype)
        self.layout: Layout = layout
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty(num_heads, dim, **factory))  # type: ignore[arg-type]
        self.bias: nn.Parameter | None = (
            nn.Parameter(torch.empty(num_heads, **factory)) if bias else None  # type: ignore[arg-type]
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``nn.Linear``'s initialization of ``W`` (and ``b``)."""
        if self.weight.device.type == "meta":
            return
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        if self.bias is not None:
            bound = 1.0 / self.dim**0.5
            nn.init.uniform_(self.bias, -bound, bound)

    def phases(
        self, x: Tensor, previous: Tensor | None = None, real: Tensor | None = None
    ) -> Tensor:
        """Phases of the new tokens ``(batch, heads, seq, head_dim / 2)``, float64, continuing
        ``previous`` (the last cached token's; None at the start). ``real`` ``(batch, seq)``
        bool: padding tokens (False) add nothing, so the real tokens' phases are unchanged."""
        rates = carope_rates(x, self.weight, self.bias)
        return carope_phases(rates, self.head_dim // 2, previous, real)

    def rotate(self, x: Tensor, phases: Tensor) -> Tensor:
        """``x`` ``(batch, heads, seq, head_dim)`` rotated by ``phases`` (from :meth:`phases`)."""
        return grape_rotate(x, torch.cos(phases), torch.sin(phases), self.layout)

    def token_phases(
        self,
        x: Tensor,
        previous: Tensor | None,
        real: Tensor | None,
        starts: Tensor | None,
    ) -> Tensor:
        """:meth:`phases`, restarting at document ``starts`` (attention's hot path)."""
        rates = carope_rates(x, self.weight, self.bias)
        return carope_phases(rates, self.head_dim // 2, previous, real, starts)

    def rotate_by_phases(self, q: Tensor, k: Tensor, phases: Tensor) -> tuple[Tensor, Tensor]:
        """k by ``phases`` ``(batch, num_heads, seq, pairs)``; the query heads of a group by
        their key head's."""
        cos, sin = torch.cos(phases), torch.sin(phases)
        k = grape_rotate(k, cos, sin, self.layout)
        group = q.shape[1] // phases.shape[1]
        if group > 1:  # query head h reads key head h // group
            cos, sin = cos.repeat_interleave(group, dim=1), sin.repeat_interleave(group, dim=1)
        return grape_rotate(q, cos, sin, self.layout), k

    def forward(self, q: Tensor, k: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        """q and k of one sequence rotated by the phases of ``x``; validated.

        Raises:
            ValueError: naming ``x`` (not floating ``(batch, seq, dim)``, not finite, on
                another device than the parameters), ``q`` or ``k`` (not floating ``(batch,
                num_heads, seq, head_dim)`` of ``x``'s batch and length).
        """
        check_layer_input(x, self.dim, type(self).__name__, self.weight.device)
        want = (x.shape[0], self.num_heads, x.shape[1], self.head_dim)
        for name, t in (("q", q), ("k", k)):
            if not isinstance(t, Tensor) or not t.is_floating_point() or tuple(t.shape) != want:
                got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{name} must be a floating tensor (batch, num_heads, seq, head_dim) = "
                    f"{want}; got {got}"
                )
        phases = self.phases(x)
        return self.rotate(q, phases), self.rotate(k, phases)

    def extra_repr(self) -> str:
        return (
            f"dim={self.dim}, num_heads={self.num_heads}, head_dim={self.head_dim}, "
            f"layout={self.layout!r}, bias={self.bias is not None}"
        )
