"""RoPE context-extension scalings: typed values that give inverse frequencies and ``A``.

A scaling replaces plain RoPE's ``θ_i = b^(-2i/d)`` by ``θ'_i`` and may add an attention
factor ``A`` that multiplies cos and sin (so the logits by ``A²``, HF convention). Each
scaling is a frozen dataclass validated on construction (``ValueError`` naming the field and
its allowed range); :meth:`Scaling.inv_freq` computes float64 values on the CPU.

One module per family:

===================  ===========================================================================
``base``             :class:`Scaling`, the interface
``linear``           :class:`Linear` (position interpolation)
``ntk``              :class:`NTKAware`, :class:`DynamicNTK`
``yarn``             :class:`YaRN`, its correction range and ramp
``per_frequency``    :class:`LongRoPE`, :class:`Llama3`, :class:`Proportional`
``vllm``             :class:`FixedNTK`, :class:`GeometricYaRN`, :class:`BasePower` (vLLM and
                     Grok-1 serve them; HF has no ``rope_type`` for them)
``riflex``           :class:`RIFLEx` (video length extrapolation: the intrinsic temporal
                     frequency lowered to one period)
``dype``             :class:`DyPE` (PI, NTK or YaRN whose strength follows the diffusion
                     timestep; not a :class:`Scaling` itself: :meth:`DyPE.at` gives one)
``dict_form``        :func:`scaling_from_dict`, :func:`scaling_to_dict`, :func:`scaling_types`
``length``           :class:`LengthState`: how a length-dependent scaling's frequencies follow
                     the sequence length in one module (HF's ``dynamic_rope_update``), and
                     the length rules ``"forward"`` and ``"query"``
``laws``             RoPE's periods and the scaling laws of RoPE-based extrapolation
===================  ===========================================================================

Notation: ``b`` base, ``d`` rotary dim, ``s`` factor, ``L0`` original context length.
Every formula of :mod:`~posenc.rotary.scaling.linear`, :mod:`~posenc.rotary.scaling.ntk`,
:mod:`~posenc.rotary.scaling.yarn` and :mod:`~posenc.rotary.scaling.per_frequency`
reproduces HF transformers 5.23 ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` (tested to 1e-6
relative on the frequencies and exactly on ``A``), computed in float64.

Differences from HF, all deliberate:

* values HF only warns about raise here: ``factor`` < 1 for the extension methods (> 0 for
  :class:`Linear` and :class:`Proportional`, which are plain divisions), ``beta_fast`` <
  ``beta_slow``, ``low_freq_factor`` > ``high_freq_factor``, LongRoPE factor lists whose
  length is not ``d/2``;
* YaRN ``beta_fast``/``beta_slow`` must be > 0: HF's ``beta or default`` silently turns 0
  into the default, which a typed value has no need for;
* Llama-3 with ``low_freq_factor == high_freq_factor``: the smoothing band is empty; the
  single wavelength ``λ = L0/lf`` (if hit exactly) is kept, where HF divides 0 by 0.
"""

from __future__ import annotations

from posenc.rotary.scaling.base import Scaling
from posenc.rotary.scaling.dict_form import scaling_from_dict, scaling_to_dict, scaling_types
from posenc.rotary.scaling.dype import DyPE
from posenc.rotary.scaling.length import LENGTH_RULES, LengthRule, LengthState, sequence_length
from posenc.rotary.scaling.linear import Linear
from posenc.rotary.scaling.ntk import DynamicNTK, NTKAware
from posenc.rotary.scaling.per_frequency import Llama3, LongRoPE, Proportional
from posenc.rotary.scaling.riflex import RIFLEx, riflex_intrinsic_k
from posenc.rotary.scaling.vllm import BasePower, FixedNTK, GeometricYaRN
from posenc.rotary.scaling.yarn import YaRN, check_ramp_fields, yarn_correction_range, yarn_ramp

__all__ = [
    "LENGTH_RULES",
    "BasePower",
    "DyPE",
    "DynamicNTK",
    "FixedNTK",
    "GeometricYaRN",
    "LengthRule",
    "LengthState",
    "Linear",
    "Llama3",
    "LongRoPE",
    "NTKAware",
    "Proportional",
    "RIFLEx",
    "Scaling",
    "YaRN",
    "check_ramp_fields",
    "riflex_intrinsic_k",
    "scaling_from_dict",
    "scaling_to_dict",
    "scaling_types",
    "sequence_length",
    "yarn_correction_range",
    "yarn_ramp",
]
