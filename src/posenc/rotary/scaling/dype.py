"""DyPE: a context-extension scaling whose strength follows the diffusion timestep, for
resolution extrapolation of diffusion transformers (Issachar et al. 2025,
https://arxiv.org/abs/2510.20766).

Diffusion settles low spatial frequencies early (large ``t``, near noise) and high ones
late (``t → 0``). DyPE therefore extrapolates strongly at the start and returns to the
model's own positional encoding at the end, through one exponent

.. math:: κ(t) = λ_s \\, t^{λ_t}, \\qquad t ∈ [0, 1] \\;(t = 1: \\text{pure noise})

applied to the static method's parameters:

* Dy-PI (:class:`~posenc.rotary.scaling.Linear`) and Dy-NTK
  (:class:`~posenc.rotary.scaling.NTKAware`): the factor becomes ``s^{κ(t)}``;
* Dy-YaRN (:class:`~posenc.rotary.scaling.YaRN`): the ramp's rotation counts become
  ``β_fast^{κ(t)}`` and ``β_slow^{κ(t)}``; ``s`` and ``A`` stay.

At ``κ = 1`` (``λ_s = 1, t = 1``) each is the static method exactly; at ``t = 0`` Dy-PI and
Dy-NTK are plain RoPE and Dy-YaRN keeps every frequency with more than one turn over ``L0``
and divides the others by ``s`` (a hard NTK-by-parts cut at one rotation). With ``β_slow ≥
1`` every frequency is non-increasing in ``t``.

Reference: the authors' code (``get_1d_rotary_pos_embed`` with ``dype=True``, where
``λ_s = λ_t = dype_exponent = 2``). Its NTK branch multiplies the base by
``ntk_factor^{κ(t)}``, which is Dy-NTK with ``s^{d/(d-2)} = ntk_factor`` (tested). Its YaRN
branch is a three-band "vision YaRN" (ramps at ``β = 1.25, 0.75`` between PI and NTK and at
``γ = 16, 2`` back to plain RoPE, ``A = 0.1 ln s + 1``), a different static method from
posenc's (HF's) YaRN; DyPE's rule, every ramp rotation count raised to ``κ(t)``, is the
same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from torch import Tensor

from posenc._validate import check_positive_float
from posenc.rotary.scaling.linear import Linear
from posenc.rotary.scaling.ntk import NTKAware
from posenc.rotary.scaling.yarn import YaRN

__all__ = ["DyPE"]


def _check_timestep(t: object) -> float:
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise ValueError(f"t must be a diffusion timestep in [0, 1], got {t!r}")
    if not 0.0 <= t <= 1.0:
        raise ValueError(f"t must be a diffusion timestep in [0, 1] (1 = pure noise), got {t}")
    return float(t)


@dataclass(frozen=True)
class DyPE:
    """A static scaling (PI, NTK-aware, YaRN) made a function of the diffusion timestep.

    .. math::

        κ(t) = λ_s t^{λ_t}; \\quad \\text{Dy-PI, Dy-NTK: } s \\to s^{κ(t)}; \\quad
        \\text{Dy-YaRN: } β_{fast} \\to β_{fast}^{κ(t)},\\; β_{slow} \\to β_{slow}^{κ(t)}

    :meth:`at` gives the static scaling of one timestep: build the step's rotary with it
    (e.g. :func:`posenc.rotary.diffusion.flux_rotary` ``scalings=[s_t, s_t, s_t]``), so that
    the tables are a function of ``(positions, t)``. See the module for the limits.

    Paper: Issachar et al. 2025, https://arxiv.org/abs/2510.20766. Dy-NTK tested against
    a float64 re-derivation of the authors' ``get_1d_rotary_pos_embed(dype=True)``.

    Args:
        scaling: the static method, :class:`~posenc.rotary.scaling.Linear`,
            :class:`~posenc.rotary.scaling.NTKAware` or a static
            :class:`~posenc.rotary.scaling.YaRN`, with ``factor`` ≥ 1 (the resolution ratio
            of the axis it is applied to).
        lambda_s: ``λ_s`` > 0, the exponent at ``t = 1`` (2 as the reference).
        lambda_t: ``λ_t`` > 0, how fast the strength decays with ``t`` (2 as the reference).

    Example::

        >>> dype = DyPE(NTKAware(4.0))
        >>> dype.at(0.5)
        NTKAware(factor=2.0)
        >>> dype.at(0.0)
        NTKAware(factor=1.0)
    """

    scaling: Linear | NTKAware | YaRN
    lambda_s: float = 2.0
    lambda_t: float = 2.0

    def __post_init__(self) -> None:
        if not isinstance(self.scaling, (Linear, NTKAware, YaRN)):
            raise ValueError(
                "scaling must be a Linear, NTKAware or YaRN (DyPE's PI, NTK and YaRN), got "
                f"{type(self.scaling).__name__}"
            )
        if isinstance(self.scaling, YaRN) and self.scaling.dynamic:
            raise ValueError("scaling must be a static YaRN (dynamic=False): DyPE sets its factor")
        if self.scaling.factor < 1.0:
            raise ValueError(
                f"scaling.factor must be >= 1 (an extrapolation factor), got {self.scaling.factor}"
            )
        object.__setattr__(self, "lambda_s", check_positive_float("lambda_s", self.lambda_s))
        object.__setattr__(self, "lambda_t", check_positive_float("lambda_t", self.lambda_t))

    def strength(self, t: float) -> float:
        """``κ(t) = λ_s t^{λ_t}``: 0 at ``t = 0``, ``λ_s`` at ``t = 1``."""
        return self.lambda_s * _check_timestep(t) ** self.lambda_t

    def at(self, t: float) -> Linear | NTKAware | YaRN:
        """The static scaling of timestep ``t`` ∈ [0, 1] (``ValueError`` outside)."""
        kappa = self.strength(t)
        scaling = self.scaling
        if isinstance(scaling, YaRN):
            return replace(
                scaling, beta_fast=scaling.beta_fast**kappa, beta_slow=scaling.beta_slow**kappa
            )
        return replace(scaling, factor=scaling.factor**kappa)

    def inv_freq(self, rotary_dim: int, base: float, t: float) -> Tensor:
        """float64 ``(rotary_dim // 2,)`` inverse frequencies at timestep ``t``."""
        return self.at(t).inv_freq(rotary_dim, base)

    def attention_factor_at(self, t: float) -> float:
        """``A`` at timestep ``t`` (YaRN's, constant in ``t``; 1 for PI and NTK)."""
        return self.at(t).attention_factor
