"""PoPE, polar position embedding: magnitudes from content, phases from position alone.

Each channel ``c`` of a query or key becomes a complex number whose magnitude is
``softplus`` of the channel (the "what") and whose phase is the position times a frequency
(the "where"); the logit is the real part of their product:

.. math::
    \\ell_{ij} = \\text{scale} \\sum_{c=1}^{d} \\operatorname{softplus}(q_{ic})
    \\operatorname{softplus}(k_{jc}) \\cos\\big((i - j)\\theta_c - \\delta_{hc}\\big),
    \\qquad \\theta_c = \\text{base}^{-(c-1)/d}

with a learned phase bias ``δ_hc ∈ [−2π, 0]`` per head and channel. Realised as real
vectors of width ``2d``: ``q' = softplus(q) ⊙ [cos(iθ − δ), sin(iθ − δ)]`` and
``k' = softplus(k) ⊙ [cos jθ, sin jθ]``, so that ``q' · k'`` is the sum above and every
attention backend computes it as a plain dot product (keys and queries of width ``2d``,
values of width ``d``).
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc._validate import (
    check_floating_dtype,
    check_in_choices,
    check_positive_float,
    check_positive_int,
)
from posenc.encoding.protocols import RotaryEncoding

__all__ = ["BiasInit", "PolarEmbedding", "polar_frequencies", "polar_map"]

BiasInit = Literal["zeros", "uniform"]
BIAS_INITS: tuple[str, ...] = get_args(BiasInit)


def polar_frequencies(head_dim: int, base: float = 10000.0) -> Tensor:
    """PoPE's ``d`` frequencies ``θ_c = base^(−c/d)``, ``c = 0 … d − 1``, float64 on the CPU
    (one per channel, not per pair as RoPE's)."""
    head_dim = check_positive_int("head_dim", head_dim)
    check_positive_float("base", base)
    exponent = torch.arange(head_dim, dtype=torch.float64) / head_dim
    return torch.tensor(base, dtype=torch.float64) ** -exponent


def polar_map(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``softplus(x) ⊙ [cos, sin]``: ``(..., d)`` → ``(..., 2d)``.

    Computed in float32 for half-precision ``x`` (float64 stays float64), rounded once to
    ``x``'s dtype. ``cos`` and ``sin`` broadcast against ``x``.
    """
    cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    magnitude = F.softplus(x.to(cdt))
    return torch.cat([magnitude * cos.to(cdt), magnitude * sin.to(cdt)], dim=-1).to(x.dtype)


class PolarEmbedding(RotaryEncoding):
    """PoPE (Gopalakrishnan et al. 2025): polar coordinates that decouple what from where.

    .. math::
        \\ell_{ij} = \\text{scale} \\sum_c \\operatorname{softplus}(q_{ic})
        \\operatorname{softplus}(k_{jc}) \\cos\\big((i - j)\\theta_c - \\delta_{hc}\\big)

    Paper: https://arxiv.org/abs/2509.10534 (Decoupling the "What" and "Where" With Polar
    Coordinate Positional Embeddings). Tested against x-transformers' ``PolarEmbedding`` /
    ``apply_polar_pos_emb`` and a float64 evaluation of the formula.

    A rotary encoding whose ``rotate_qk`` maps q and k of width ``head_dim`` to width
    ``2 · head_dim`` (see the module docstring); the values keep ``head_dim``. The logit
    scale stays ``head_dim ** -0.5`` (x-transformers'). The phase bias enters the *query*
    (x-transformers adds ``+δ`` to the key's phase, the same logit): cached keys never depend
    on it, and under grouped-query attention each query head has its own ``δ``. ``δ`` is
    clamped to ``[−2π, 0]`` when used (the paper's range; the parameter itself is free).

    Backends: ``sdpa`` (SDPA takes q/k wider than v; the CPU flash kernel of the
    key-padding path does not, so those calls take query blocks), ``chunked`` and ``flex``
    (FlexAttention takes a value width other than q's). The KV cache keeps the mapped keys
    (width ``2 · head_dim``).

    Args:
        head_dim: per-head width of q and k before the map.
        num_heads: query heads (one phase bias per head and channel).
        base: frequency base, ``θ_c = base^(−c/d)``.
        bias_init: ``"zeros"`` (the paper's and x-transformers' default) or ``"uniform"``
            in ``[−2π, 0]`` (x-transformers' ``polar_bias_uniform_init``).

    Example::

        >>> pope = PolarEmbedding(head_dim=8, num_heads=2)
        >>> q = k = torch.randn(1, 2, 5, 8)
        >>> q2, k2 = pope(q, k, torch.arange(5), torch.arange(5))
        >>> q2.shape
        torch.Size([1, 2, 5, 16])
    """

    def __init__(
        self,
        head_dim: int,
        num_heads: int,
        *,
        base: float = 10000.0,
        bias_init: BiasInit = "zeros",
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        head_dim = check_positive_int("head_dim", head_dim)
        num_heads = check_positive_int("num_heads", num_heads)
        check_positive_float("base", base)
        check_in_choices("bias_init", bias_init, BIAS_INITS)
        check_floating_dtype("dtype", dtype)
        self.head_dim, self.num_heads, self.base = head_dim, num_heads, float(base)
        self.bias_init: BiasInit = bias_init
        self.phase_bias = nn.Parameter(torch.empty(num_heads, head_dim, device=device, dtype=dtype))
        self._frequencies: dict[torch.device, Tensor] = {}  # float64, per device, not state
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``δ = 0``, or uniform in ``[−2π, 0]`` (``bias_init``)."""
        if self.phase_bias.device.type == "meta":
            return
        with torch.no_grad():
            if self.bias_init == "zeros":
                self.phase_bias.zero_()
            else:
                self.phase_bias.uniform_(-2 * math.pi, 0.0)

    def frequencies(self, device: torch.device) -> Tensor:
        """``θ`` ``(head_dim,)`` in float64 on ``device`` (memoised, never a buffer)."""
        if device not in self._frequencies:
            self._frequencies[device] = polar_frequencies(self.head_dim, self.base).to(device)
        return self._frequencies[device]

    def rotary_tables(
        self,
        positions: Tensor,
        dtype: torch.dtype,
        *,
        update: bool = True,
        length: int | None = None,
    ) -> Any:
        """``(cos, sin)`` of ``positions · θ`` ``([batch,] seq, head_dim)``, from float64
        phases, in float32 (float64 for float64)."""
        table = torch.float64 if dtype == torch.float64 else torch.float32
        angles = positions.to(torch.float64).unsqueeze(-1) * self.frequencies(positions.device)
        return angles.cos().to(table), angles.sin().to(table)

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """``q' = softplus(q) ⊙ [cos(iθ − δ), sin(iθ − δ)]``, ``k' = softplus(k) ⊙ [cos jθ,
        sin jθ]``, both of width ``2 · head_dim`` (new tensors: ``inplace`` cannot apply)."""
        q_cos, q_sin = (_heads(t) for t in q_tables)
        delta = self.phase_bias.clamp(-2 * math.pi, 0.0).to(q_cos.dtype).unsqueeze(-2)
        cos_d, sin_d = delta.cos(), delta.sin()  # (heads, 1, d)
        # cos(a − δ) = cos a cos δ + sin a sin δ;  sin(a − δ) = sin a cos δ − cos a sin δ
        shifted_cos = q_cos * cos_d + q_sin * sin_d
        shifted_sin = q_sin * cos_d - q_cos * sin_d
        k_cos, k_sin = (_heads(t) for t in k_tables)
        return polar_map(q, shifted_cos, shifted_sin), polar_map(k, k_cos, k_sin)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_heads={self.num_heads}, base={self.base}, "
            f"bias_init={self.bias_init!r}"
        )


def _heads(table: Tensor) -> Tensor:
    """A table ``(seq, d)`` or ``(batch, seq, d)`` with a head axis: ``(…, 1, seq, d)``."""
    return table.unsqueeze(-3)
