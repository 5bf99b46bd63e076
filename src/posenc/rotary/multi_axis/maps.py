"""The frequency matrices of :class:`~posenc.rotary.multi_axis.MultiAxisRotary`'s presets:
which axis each channel pair reads (M-RoPE's sections, VideoRoPE's layout), how per-pair
frequencies are placed into a ``(pairs, axes)`` matrix, the axial and MHRoPE matrices,
RoPE-Mixed's initial frequencies, and EVA's positions rescaled to a reference grid.
Re-exported by :mod:`posenc.rotary.multi_axis`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc._validate import check_positive_float, check_positive_int
from posenc.positions import grid_positions
from posenc.rotary.frequencies import rope_inv_freq

__all__ = [
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


def mrope_axes(sections: Sequence[int], *, interleaved: bool = False) -> list[int]:
    """The axis (0 = t, 1 = h, 2 = w) each frequency pair reads under M-RoPE.

    ``interleaved=False`` (Qwen2-VL, 2.5-VL): consecutive chunks of ``sections[k]`` pairs read
    axis ``k``. ``interleaved=True`` (Qwen3-VL): pair ``i`` reads h when ``i % 3 == 1`` and
    ``i < 3·sections[1]``, w when ``i % 3 == 2`` and ``i < 3·sections[2]``, t otherwise.

    Example::

        >>> mrope_axes([2, 1, 1])
        [0, 0, 1, 2]
        >>> mrope_axes([2, 1, 1], interleaved=True)
        [0, 1, 2, 0]
    """
    if len(sections) != 3:
        raise ValueError(f"sections must give (t, h, w) pair counts, got {list(sections)}")
    counts = [check_positive_int(f"sections[{i}]", n) for i, n in enumerate(sections)]
    pairs = sum(counts)
    if not interleaved:
        return [axis for axis, n in enumerate(counts) for _ in range(n)]
    axes = [0] * pairs
    for axis in (1, 2):
        for index in range(axis, min(3 * counts[axis], pairs), 3):
            axes[index] = axis
    return axes


def videorope_axes(sections: Sequence[int]) -> list[int]:
    """The axis (0 = t, 1 = h, 2 = w) each frequency pair reads under VideoRoPE's LTA.

    Low-frequency temporal allocation (Wei et al. 2025, https://arxiv.org/abs/2502.05173,
    §3.2; reference ``apply_m_modify_multimodal_rotary_pos_emb`` in
    Wiselnn570/VideoRoPE ``videorope-transformer/modeling_videorope.py``): of the pairs
    ``i = 0 … t+h+w−1`` (frequency ``θ_i = base^(−2i/head_dim)``, highest first), the first
    ``h + w`` alternate h, w, h, w, … (h at even ``i``) and the last ``t`` — the lowest
    frequencies — read time. The reference merges ``mrope_section`` ``[t, h, w]`` into
    ``[t, h + w]``, so h gets ``⌈(h+w)/2⌉`` pairs: ``h`` must equal ``w`` or ``w + 1``.

    Example::

        >>> videorope_axes([2, 2, 2])
        [1, 2, 1, 2, 0, 0]
    """
    if len(sections) != 3:
        raise ValueError(f"sections must give (t, h, w) pair counts, got {list(sections)}")
    t, h, w = (check_positive_int(f"sections[{i}]", n) for i, n in enumerate(sections))
    if h - w not in (0, 1):
        raise ValueError(
            f"sections must give h = w or h = w + 1 (VideoRoPE alternates h and w over the "
            f"h + w highest-frequency pairs, h first), got {list(sections)}"
        )
    return [1 + i % 2 for i in range(h + w)] + [0] * t


def mmrope_axes(pairs: int) -> list[int]:
    """The axis (0 = t, 1 = h, 2 = w) each frequency pair reads under MM-RoPE's distributed
    allocation: pair ``i`` reads ``(t, t, h, w, h, w, h, w)[i mod 8]``, so every meta
    component of eight pairs spreads t : h : w as 2 : 3 : 3 across the whole frequency band.

    MM-RoPE (Lumos-1, Yuan et al. 2025, https://arxiv.org/abs/2507.08801, §3.2); reference
    ``MMRopeEmbedding.apply_transformation`` in JJJYmmm/Multimodal-RoPEs
    (``freq_allocation/mmrope.py``); remainder pairs keep the pattern.

    Example::

        >>> mmrope_axes(10)
        [0, 0, 1, 2, 1, 2, 1, 2, 0, 0]
    """
    pairs = check_positive_int("pairs", pairs)
    pattern = (0, 0, 1, 2, 1, 2, 1, 2)
    return [pattern[i % 8] for i in range(pairs)]


def mhrope_head_axes(sections: Sequence[int], num_heads: int) -> list[int]:
    """The axis (0 = t, 1 = h, 2 = w, or -1 = none) each head reads under MHRoPE: the first
    ``sections[0]`` heads read t with all their pairs, the next ``sections[1]`` h, the next
    ``sections[2]`` w; heads past ``sum(sections)`` read no axis (NoPE heads: identity).

    MHRoPE (Huang et al. 2025, https://arxiv.org/abs/2510.23095, §4.2); reference
    ``MHRopeEmbedding.apply_transformation`` in JJJYmmm/Multimodal-RoPEs
    (``freq_allocation/mhrope.py``), whose heads are the key/value heads.

    Example::

        >>> mhrope_head_axes([1, 2, 2], 6)
        [0, 1, 1, 2, 2, -1]
    """
    if len(sections) != 3:
        raise ValueError(f"sections must give (t, h, w) head counts, got {list(sections)}")
    counts = [check_positive_int(f"sections[{i}]", n) for i, n in enumerate(sections)]
    num_heads = check_positive_int("num_heads", num_heads)
    if sum(counts) > num_heads:
        raise ValueError(
            f"sections must assign at most num_heads = {num_heads} heads, got {counts} "
            f"(sum {sum(counts)})"
        )
    axes = [axis for axis, n in enumerate(counts) for _ in range(n)]
    return axes + [-1] * (num_heads - len(axes))


def axial_frequencies(
    head_dim: int,
    num_axes: int = 2,
    *,
    base: float = 100.0,
    axis_order: Sequence[int] | None = None,
) -> Tensor:
    """Axial RoPE's ``(pairs, axes)`` matrix (:meth:`MultiAxisRotary.axial
    <posenc.rotary.multi_axis.MultiAxisRotary.axial>`): group ``g`` of ``head_dim / (2N)``
    pairs holds the 1D frequencies ``θ_k = base^(-k N / (head_dim/2))`` at column
    ``axis_order[g]`` (None = ``(N−1, …, 0)``), float64 on the CPU.

    Example::

        >>> axial_frequencies(4, 2, base=100.0)
        tensor([[0., 1.],
                [1., 0.]], dtype=torch.float64)
    """
    axes = check_positive_int("num_axes", num_axes)
    base = check_positive_float("base", base)
    order = list(range(axes))[::-1] if axis_order is None else [int(a) for a in axis_order]
    if sorted(order) != list(range(axes)):
        raise ValueError(f"axis_order must be a permutation of 0..{axes - 1}, got {order}")
    if head_dim % (2 * axes):
        raise ValueError(
            f"head_dim must be divisible by {2 * axes} (pairs split between {axes} axes), "
            f"got {head_dim}"
        )
    group = head_dim // (2 * axes)
    inv_freq = rope_inv_freq(2 * group, base, device="cpu")  # (group,)
    freqs = torch.zeros(axes * group, axes, dtype=torch.float64, device="cpu")
    for index, axis in enumerate(order):
        freqs[index * group : (index + 1) * group, axis] = inv_freq
    return freqs


def mhrope_frequencies(
    head_dim: int, num_heads: int, sections: Sequence[int] = (2, 3, 3), *, base: float = 1e6
) -> Tensor:
    """MHRoPE's ``(heads, head_dim/2, 3)`` matrix (:meth:`MultiAxisRotary.mhrope
    <posenc.rotary.multi_axis.MultiAxisRotary.mhrope>`): head ``n`` holds the full 1D
    frequencies ``θ_i = base^(−2i/head_dim)`` at column :func:`mhrope_head_axes`
    ``(sections, num_heads)[n]``, zeros for heads that read no axis; float64 on the CPU.

    Example::

        >>> mhrope_frequencies(2, 4, (1, 1, 1), base=100.0)[:, 0].tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    """
    head_dim = check_positive_int("head_dim", head_dim)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even, got {head_dim}")
    head_axes = mhrope_head_axes(sections, num_heads)
    base = check_positive_float("base", base)
    inv_freq = rope_inv_freq(head_dim, base, device="cpu")
    freqs = torch.zeros(len(head_axes), head_dim // 2, 3, dtype=torch.float64, device="cpu")
    for head, axis in enumerate(head_axes):
        if axis >= 0:
            freqs[head, :, axis] = inv_freq
    return freqs


def place_frequencies(inv_freq: Tensor, pair_axes: Tensor, num_axes: int) -> Tensor:
    """The ``(pairs, axes)`` frequency matrix whose row ``i`` holds ``inv_freq[i]`` at column
    ``pair_axes[i]`` (M-RoPE: each pair reads one axis), float64 on ``inv_freq``'s device.

    Example::

        >>> place_frequencies(torch.tensor([1.0, 0.5]), torch.tensor([1, 0]), 2)
        tensor([[0.0000, 1.0000],
                [0.5000, 0.0000]], dtype=torch.float64)
    """
    freqs = torch.zeros(len(pair_axes), num_axes, dtype=torch.float64, device=inv_freq.device)
    # rows on inv_freq's device too: under a meta default device (a meta build) an index
    # made there wrote nothing, and M-RoPE's constant frequencies were all zero
    rows = torch.arange(len(pair_axes), device=inv_freq.device)
    freqs[rows, pair_axes.to(inv_freq.device)] = inv_freq.double()
    return freqs


def rescaled_grid_positions(
    *sizes: int, reference: Sequence[int], device: torch.device | str | None = None
) -> Tensor:
    """Grid positions scaled to a reference grid, ``a · reference_a / size_a`` (EVA, timm's
    ``ref_feat_shape``): a model trained at ``reference`` sees the same position span at any
    resolution. Float64 ``(len(sizes), prod(sizes))``.

    Example::

        >>> rescaled_grid_positions(2, 2, reference=(4, 4)).tolist()
        [[0.0, 0.0, 2.0, 2.0], [0.0, 2.0, 0.0, 2.0]]
    """
    if not sizes:
        raise ValueError("sizes must name at least one grid axis")
    sizes = tuple(check_positive_int(f"sizes[{index}]", size) for index, size in enumerate(sizes))
    if len(reference) != len(sizes):
        raise ValueError(f"reference must have one size per axis ({len(sizes)}), got {reference}")
    ref = [check_positive_int(f"reference[{i}]", n) for i, n in enumerate(reference)]
    scale = torch.tensor([r / s for r, s in zip(ref, sizes, strict=True)], dtype=torch.float64)
    return grid_positions(*sizes, device=device).double() * scale.to(device)[:, None]


def mixed_frequencies(
    head_dim: int,
    num_heads: int,
    base: float,
    generator: torch.Generator | None,
    device: torch.device,
) -> Tensor:
    """RoPE-Mixed's initial ``(heads, head_dim/2, 2)`` frequencies (RoPE-ViT
    ``init_random_2d_freqs``), float32, drawn on ``generator``'s device (else ``device``'s
    global generator: none is drawn on the meta device)."""
    where = generator.device if generator is not None else device
    quarter = head_dim // 4
    mag = torch.tensor(
        [base ** (-4.0 * k / head_dim) for k in range(quarter)], dtype=torch.float32, device=where
    )
    phi = torch.rand(num_heads, 1, generator=generator, dtype=torch.float32, device=where)
    phi = phi * 2 * torch.pi
    col = torch.cat((mag * phi.cos(), -mag * phi.sin()), dim=-1)  # (heads, d/2)
    row = torch.cat((mag * phi.sin(), mag * phi.cos()), dim=-1)
    return torch.stack((row, col), dim=-1)
