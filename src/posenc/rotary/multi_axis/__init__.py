"""Rotary encodings over several position axes: axial 2D/3D, M-RoPE, RoPE-Mixed — one class.

Every channel pair ``p`` of a head rotates by a linear function of the token's position axes
``a`` (row and column; time, row and column):

.. math:: φ_p = \\sum_a \\mathrm{pos}_a · F_{p,a}

with a frequency matrix ``F`` of shape ``(pairs, axes)``, or ``(heads, pairs, axes)`` when each
head has its own. The methods are presets of ``F`` (:class:`MultiAxisRotary` constructors):

* :meth:`~MultiAxisRotary.axial` (RoPE-ViT axial, Heo et al. 2024,
  https://arxiv.org/abs/2403.13298; rotary-embedding-torch ``get_axial_freqs``; EVA/timm
  ``RotaryEmbeddingCat``): the pairs are cut into one consecutive group per axis, each group
  a 1D RoPE of ``head_dim / N`` channels (``θ_k = base^(-k N / (head_dim/2))``);
* :meth:`~MultiAxisRotary.mrope` (Qwen2-VL's M-RoPE, Wang et al. 2024,
  https://arxiv.org/abs/2409.12191): plain 1D frequencies ``θ_i = base^(-2i/head_dim)``, pair
  ``i`` reading the axis of its ``mrope_section`` chunk (t, h, w); Qwen3-VL's interleaved
  variant reads h at ``i ≡ 1 (mod 3)``, w at ``i ≡ 2``, t elsewhere, within the sections;
* :meth:`~MultiAxisRotary.videorope` (VideoRoPE, Wei et al. 2025,
  https://arxiv.org/abs/2502.05173): M-RoPE's frequencies with h and w interleaved over the
  highest and time on the lowest (:func:`videorope_axes`);
* :meth:`~MultiAxisRotary.mixed` (RoPE-Mixed, Heo et al. 2024): learnable per-head
  frequencies over both axes, initialized at a random direction per head;
* :meth:`~MultiAxisRotary.mmrope` (MM-RoPE, 2:3:3 per eight pairs) and
  :meth:`~MultiAxisRotary.mhrope` (MHRoPE: one axis per key/value head), the multimodal RoPE
  study's allocations (Huang et al. 2025, https://arxiv.org/abs/2510.23095; positions in
  :mod:`posenc.positions.multimodal_variants`); Qwen-Image's MSRoPE (one 1D RoPE per channel
  block, Wu et al. 2025, https://arxiv.org/abs/2508.02324) is
  :func:`~posenc.rotary.qwen_image_rotary`, an axis-split instance of this class (positions in
  :mod:`posenc.positions.msrope`).

Because every angle is linear in the positions, a query–key score depends on the positions
only through their differences ``(Δa_0, Δa_1, …)``. On a ``1 × N`` grid the axial encoding is
1D RoPE of ``head_dim / 2`` channels on the column; on text (all axes equal) M-RoPE is 1D RoPE.

Positions are multi-axis, ``(N, seq)`` or ``(N, batch, seq)`` (build them with
:func:`posenc.positions.grid_positions` or :func:`posenc.positions.multimodal.mrope_position_ids`);
floating positions are legal (EVA's rescaling to a reference grid,
:func:`rescaled_grid_positions`). Fixed frequencies rotate through the kernels of
:mod:`posenc.rotary.kernels` (angles in float64, one rounding, in place without autograd);
learnable or per-head ones through differentiable torch ops.

Fixed frequencies are no buffer: as :class:`~posenc.rotary.RotaryEmbedding`'s ``inv_freq``
they are kept in float64 on the CPU and memoised per device outside ``state_dict`` and
``Module._apply``, so ``model.to(torch.bfloat16)`` leaves them exact (transformers#25681)
and a module built on the ``meta`` device rotates correctly after ``to_empty``. Learnable
frequencies (RoPE-Mixed) are a parameter, saved and cast like every weight: ``.to(bfloat16)``
rounds them (relative error ≤ 2⁻⁹), and the angles are then computed in float32 from the
rounded values; keep the module in float32 (e.g. ``model.to(torch.bfloat16)`` then
``rope.float()``) for float32 frequencies. :meth:`MultiAxisRotary.reset_parameters` redraws
them (RoPE-Mixed) or restores the given ones.

One module per concept: :mod:`~posenc.rotary.multi_axis.rotary` holds the class and its
presets, :mod:`~posenc.rotary.multi_axis.maps` the frequency matrices they build (which axis
each pair reads, the axial and MHRoPE matrices, RoPE-Mixed's initial draw) and EVA's rescaled
grid positions.
"""

from __future__ import annotations

from posenc.rotary.multi_axis.maps import (
    axial_frequencies,
    mhrope_frequencies,
    mhrope_head_axes,
    mixed_frequencies,
    mmrope_axes,
    mrope_axes,
    place_frequencies,
    rescaled_grid_positions,
    videorope_axes,
)
from posenc.rotary.multi_axis.rotary import MultiAxisRotary

__all__ = [
    "MultiAxisRotary",
    "axial_frequencies",
    "mhrope_frequencies",
    "mhrope_head_axes",
    "mixed_frequencies",
    "mmrope_axes",
    "mrope_axes",
    "place_frequencies",
    "rescaled_grid_positions",
    "videorope_axes",
]
