"""Move rotated keys to other positions: ``rerotate(keys, delta, rope)``.

A key rotated at position ``p`` and cached can be reused at position ``p + δ`` (a document
cached once and placed after another prefix, merged caches, a rolling window) without the
unrotated key: for every rotary whose rotation angles are linear in the position,

.. math:: R(p + δ) = R(δ)\\,R(p),

so the key at ``p + δ`` is the cached key rotated once more, by ``δ``. This holds for RoPE with
any static scaling (PI, NTK, YaRN, Llama-3, proportional; the attention factor ``A`` scales
both sides and is not applied again), both pair layouts and partial rotary, M-RoPE and the
other multi-axis presets (``δ`` per axis), ComRoPE (commuting learned generators), PoPE's key
phases, and xPos up to its scale, whose ratio ``ζ^{-δ/B}`` is applied with the rotation.

Numerics: the angles ``δ·θ`` (and xPos' scales) are computed in float64, the keys are rotated
in float64 and rounded once to their dtype. Against a fresh rotation ``R(p + δ)k`` of the
unrotated key the result differs only by the rounding the cached key already carries, the one
rounding of the result and the fresh rotation's own roundings: per element at most
``(3 u + (5 + √2) u₃₂)·r`` for bfloat16 and float16 (``u`` the dtype's unit roundoff, 2⁻⁸ and
2⁻¹¹; about 1.5 ulp at the magnitude ``r`` of the key's pair), ``(6 + √2)·u₃₂·r`` for float32
and ``(8 + 2√2)·u₆₄·r`` for float64, plus the float64 phase resolution ``u₆₄·(|p| + |δ| + |p +
δ|)·θ_max·r``. docs/long-context.md ("Moving cached keys: rerotate") derives the bound; the
tests check it on whole tensors.

Where it is not exact, :func:`rerotate` raises ``ValueError`` naming the rotary and why:

* frequencies that follow the sequence length (dynamic NTK, dynamic YaRN, LongRoPE's switch of
  factors): the cached keys and the fresh prefill at ``p + δ`` may have used different
  frequencies. Pass ``frequency_length`` (the length whose frequencies rotated the keys and
  rotate the moved block) to state they are the same; or keep such keys unrotated
  (:class:`~posenc.attention.KVCache`, ``keys="unrotated"``), which needs no re-rotation;
* cos/sin tables stored in bfloat16 or float16 (``dtype=`` of the rotary): ``R(p)`` is then no
  rotation (``cos² + sin² ≠ 1``) and no map of ``δ`` alone moves it;
* LieRE with several axes: its generators do not commute and ``R(p + δ) R(p)⁻¹`` depends on
  ``p``; FoPE (learned Fourier coefficients, no rotation) and the 2D axial rotary over token
  indices (a shift of the index is no fixed shift of (row, column)).

Paper: RoFormer (the identity), https://arxiv.org/abs/2104.09864; the use case:
position-independent caching (sglang RFC #30928, mistral.rs #1936) and CacheBlend
(https://arxiv.org/abs/2405.16444), which recomputes the tokens whose deeper hidden states
differ (the re-rotation is exact for the keys a layer computed, not for the context they saw).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from posenc.encoding.protocols import RotaryEncoding
from posenc.rotary.axial import AxialRotary2D
from posenc.rotary.fope import FourierRotaryEmbedding
from posenc.rotary.layouts import pair_views
from posenc.rotary.learned_rotation import LearnedRotation, rotate_blocks
from posenc.rotary.multi_axis import MultiAxisRotary
from posenc.rotary.pope import PolarEmbedding
from posenc.rotary.rope import RotaryEmbedding
from posenc.rotary.xpos import XPos, xpos_scale

__all__ = ["rerotate"]

#: Pair elements rotated per float64 chunk: small enough for the float64 copies to stay in
#: the CPU's cache (float64 copies of a whole long cache cost several times more).
_CHUNK_PAIRS = 1 << 17

Delta = int | float | Sequence[int | float] | Tensor


def rerotate(
    keys: Tensor,
    delta: Delta,
    rope: RotaryEncoding,
    *,
    frequency_length: int | None = None,
    inplace: bool = False,
) -> Tensor:
    """Keys rotated at positions ``p`` become the keys at ``p + delta``: ``R(δ)·keys``.

    .. math:: k_{p+δ} = R(p + δ)\\,k = R(δ)\\,\\big(R(p)\\,k\\big)

    Exact for rotaries whose angles are linear in the position (see the module, which lists
    those refused). Angles in float64, one rounding to ``keys.dtype``; the pass-through
    channels of partial rotary are left bit-identical. Paper: https://arxiv.org/abs/2104.09864.
    Tested against a fresh rotation ``R(p + δ)k`` (tests/rotary/test_rerotation.py).

    Args:
        keys: keys as ``rope`` rotated them, ``(batch, heads, seq, head_dim)`` (PoPE: its
            keys of width ``2·head_dim``).
        delta: the shift. One axis: a number, or a tensor broadcastable to ``(batch, seq)``:
            ``()``, ``(seq,)``, ``(batch, 1)`` per batch row, ``(batch, seq)`` per token.
            Several axes (:class:`MultiAxisRotary`, e.g. M-RoPE's (t, h, w)): ``(axes,)`` or
            ``(axes, …)`` with ``…`` as for one axis. Integer or floating, finite.
        rope: the rotary that rotated the keys.
        frequency_length: for a rotary whose frequencies follow the sequence length only:
            the length whose frequencies rotated the keys (and rotate the moved block, so
            the caller states both are the same); the keys are rotated by ``δ`` with the
            frequencies a sequence of this length gets (``rope.frequency_length``).
        inplace: overwrite ``keys`` (no autograd) instead of returning a new tensor.

    Returns:
        The moved keys, same shape and dtype (``keys`` itself when ``inplace``).

    Raises:
        ValueError: naming the argument: ``keys`` not a floating 4-D tensor of the rotary's
            width, ``delta`` of another shape or not finite, ``frequency_length`` missing for
            a length-dependent rotary (or given for another), or ``rope`` a rotary for which
            the move is not a fixed rotation (see the module).

    Example::

        >>> rope = RotaryEmbedding(64)
        >>> k = torch.randn(1, 2, 5, 64)
        >>> cached = rope.rotate(k, torch.arange(5))
        >>> moved = rerotate(cached, 100, rope)
        >>> torch.allclose(moved, rope.rotate(k, torch.arange(100, 105)), atol=1e-5)
        True
    """
    name = type(rope).__name__
    _check_exact(rope, name, frequency_length)
    width = 2 * rope.head_dim if isinstance(rope, PolarEmbedding) else _head_dim(rope, name)
    if not isinstance(keys, Tensor) or keys.dim() != 4 or not keys.is_floating_point():
        raise ValueError(
            "keys must be a floating tensor (batch, heads, seq, head_dim); got "
            f"{getattr(keys, 'shape', type(keys).__name__)}"
        )
    if keys.shape[-1] != width:
        raise ValueError(f"keys has last dim {keys.shape[-1]} but this {name} rotates {width}")
    if not isinstance(inplace, bool):
        raise ValueError(f"inplace must be a bool, got {inplace!r}")
    batch, heads, seq, _ = keys.shape
    # the float64 tables live on the keys' device (on the CPU for MPS, which has no float64)
    device = torch.device("cpu") if keys.device.type == "mps" else keys.device
    shift = _delta(delta, _num_axes(rope), batch, seq, device)  # ([axes,] b|1, seq|1), f64
    out = keys if inplace else keys.clone()
    if isinstance(rope, LearnedRotation):
        if rope.num_heads not in (1, heads):
            raise ValueError(f"keys has {heads} heads but this {name} has {rope.num_heads}")
        # commuting generators: R(δ) blockwise from the rotary's own float64 exponential
        blocks = rope.rotary_tables(shift, torch.float64)  # (b, heads|1, seq|1, n, size, size)
        for start, stop, part in _chunks(out, keys.shape[-1] // 2):
            part.copy_(rotate_blocks(part, _rows(blocks, start, stop, dim=-4).to(part.device)))
        return out
    cos, sin, layout, rotary_dim = _tables(rope, shift, frequency_length, device, heads)
    for start, stop, part in _chunks(out, rotary_dim // 2):
        _rotate_pairs(part, _rows(cos, start, stop), _rows(sin, start, stop), layout, rotary_dim)
    return out


def _head_dim(rope: RotaryEncoding, name: str) -> int:
    if isinstance(rope, (RotaryEmbedding, MultiAxisRotary, XPos, LearnedRotation)):
        return rope.head_dim
    raise ValueError(
        f"rope: rerotate moves keys of RotaryEmbedding, MultiAxisRotary (M-RoPE, axial, "
        f"VideoRoPE, RoPE-Mixed), XPos, PolarEmbedding and commuting LearnedRotation "
        f"(ComRoPE); got {name}, whose rotation by p + δ is not R(δ)·R(p) or is not known here"
    )


def _check_exact(rope: RotaryEncoding, name: str, frequency_length: int | None) -> None:
    """Raise ``ValueError`` naming ``rope`` where the move is no fixed rotation (module)."""
    if isinstance(rope, FourierRotaryEmbedding):
        raise ValueError(
            "rope: FourierRotaryEmbedding (FoPE) mixes frequencies with learned coefficients, "
            "so R(p) is no rotation and R(p + δ) ≠ R(δ)·R(p); recompute the keys instead"
        )
    if isinstance(rope, AxialRotary2D):
        raise ValueError(
            "rope: AxialRotary2D takes token indices mapped to (row, column); a shift of the "
            "index is no fixed shift of the grid. Use MultiAxisRotary.axial with grid "
            "positions and a delta per axis"
        )
    if isinstance(rope, LearnedRotation) and not rope.relative:
        raise ValueError(
            f"rope: LearnedRotation of kind {rope.kind!r} with {rope.num_axes} axes has "
            "generators that do not commute, so R(p + δ)·R(p)⁻¹ depends on p; recompute the "
            "keys (comrope_ap and comrope_ld commute and are moved exactly)"
        )
    if isinstance(rope, MultiAxisRotary) and rope.depends_on_length:
        raise ValueError(
            f"rope: this {name} has frequencies that follow the sequence length (its "
            "scaling); a moved block and a fresh prefill at the new positions may use "
            "different ones. Keep its keys unrotated (KVCache(keys='unrotated'))"
        )
    dtype = rope.dtype if isinstance(rope, (RotaryEmbedding, XPos)) else None
    if dtype is not None and dtype.itemsize < 4:
        raise ValueError(
            f"rope: this {name} stores its cos/sin tables in {dtype}, so R(p) is no rotation "
            "(cos² + sin² ≠ 1) and no map of δ alone moves the keys; build it with dtype=None"
        )
    length_dependent = isinstance(rope, RotaryEmbedding) and rope.depends_on_length
    if length_dependent and frequency_length is None:
        raise ValueError(
            f"rope: this {name} has frequencies that follow the sequence length "
            f"({type(rope.scaling).__name__}): the cached keys and a fresh prefill at p + δ "
            "may use different ones, so moving them is not exact. Pass frequency_length= (the "
            "length whose frequencies rotated both) or keep the keys unrotated "
            "(KVCache(keys='unrotated'))"
        )
    if frequency_length is not None:
        if not length_dependent:
            raise ValueError(
                f"frequency_length is only for a rotary whose frequencies follow the length; "
                f"this {name} has fixed ones (pass None)"
            )
        if isinstance(frequency_length, bool) or not isinstance(frequency_length, int):
            raise ValueError(f"frequency_length must be an int >= 1, got {frequency_length!r}")
        if frequency_length < 1:
            raise ValueError(f"frequency_length must be an int >= 1, got {frequency_length}")


def _num_axes(rope: RotaryEncoding) -> int:
    if isinstance(rope, (MultiAxisRotary, LearnedRotation)):
        return rope.num_axes
    return 1


def _delta(delta: Delta, axes: int, batch: int, seq: int, device: torch.device) -> Tensor:
    """``delta`` as float64 ``(batch|1, seq|1)``, or ``(axes, batch|1, seq|1)`` for several
    axes; raises ``ValueError`` naming ``delta``."""
    if isinstance(delta, bool) or (isinstance(delta, Tensor) and delta.dtype == torch.bool):
        raise ValueError("delta must be a number or a numeric tensor, got a bool")
    if isinstance(delta, Tensor):
        if delta.is_complex():
            raise ValueError(f"delta must be real, got {delta.dtype}")
        value = delta.detach().to(device=device, dtype=torch.float64)
    elif isinstance(delta, (int, float)) or (
        isinstance(delta, Sequence) and all(isinstance(d, (int, float)) for d in delta)
    ):
        value = torch.tensor(delta, dtype=torch.float64, device=device)
    else:
        raise ValueError(f"delta must be a number or a tensor, got {type(delta).__name__}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError("delta must be finite; it contains NaN or inf")
    one_axis = f"(), ({seq},), (1|{batch}, 1|{seq})"
    if axes > 1:
        if value.dim() == 0 or value.shape[0] != axes or value.dim() > 3:
            raise ValueError(
                f"delta must hold one shift per axis of this {axes}-axis rotary: shape "
                f"({axes},) or ({axes}, …) with … one of {one_axis}; got {tuple(value.shape)}"
            )
        rows = [_one_axis(row, batch, seq, one_axis) for row in value]
        return torch.stack(torch.broadcast_tensors(*rows))
    return _one_axis(value, batch, seq, one_axis)


def _one_axis(value: Tensor, batch: int, seq: int, allowed: str) -> Tensor:
    shape = tuple(value.shape)
    if value.dim() == 1 and shape[0] in (1, seq):
        return value[None]
    if value.dim() == 0:
        return value.reshape(1, 1)
    if value.dim() == 2 and shape[0] in (1, batch) and shape[1] in (1, seq):
        return value
    raise ValueError(
        f"delta must broadcast to (batch, seq) = ({batch}, {seq}): one of {allowed}; got {shape}"
    )


def _tables(
    rope: RotaryEncoding,
    shift: Tensor,
    frequency_length: int | None,
    device: torch.device,
    heads: int,
) -> tuple[Tensor, Tensor, str, int]:
    """float64 cos/sin of ``R(δ)`` per pair, ``(batch|1, heads|1, seq|1, pairs)``, times
    xPos' scale ratio; the layout and rotated width."""
    f64 = torch.float64
    scale: Tensor | None = None
    if isinstance(rope, MultiAxisRotary):
        freqs = rope.frequencies.detach().to(device=device, dtype=f64)
        coords = shift.movedim(0, -1)  # (batch|1, seq|1, axes)
        if rope.per_head:
            if freqs.shape[0] != heads:
                raise ValueError(
                    f"keys has {heads} heads but this MultiAxisRotary has frequencies for "
                    f"{freqs.shape[0]}"
                )
            angles = torch.einsum("bsn,hpn->bhsp", coords, freqs)
        else:
            angles = (coords @ freqs.transpose(0, 1))[:, None]
        layout, rotary_dim = rope.layout, rope.rotary_dim
    else:
        if isinstance(rope, RotaryEmbedding):
            inv_freq = _inv_freq(rope, frequency_length)
            layout, rotary_dim = rope.layout, rope.rotary_dim
        elif isinstance(rope, XPos):
            inv_freq = rope.inv_freq()
            layout, rotary_dim = rope.layout, rope.rotary_dim
            # ζ^{-(p+δ-c)/B} = ζ^{-δ/B}·ζ^{-(p-c)/B}: the key scale's ratio, per pair
            full = xpos_scale(
                shift, rotary_dim, scale_base=rope.scale_base, layout=layout, inverse=True
            )
            scale = pair_views(full, rotary_dim, layout)[0][:, None].to(device)
        else:
            assert isinstance(rope, PolarEmbedding)
            inv_freq = rope.frequencies(device)
            layout, rotary_dim = "half", 2 * rope.head_dim  # [m cos jθ | m sin jθ]
        angles = (shift[..., None] * inv_freq.to(device=device, dtype=f64))[:, None]
    cos, sin = angles.cos(), angles.sin()
    if scale is not None:
        cos, sin = cos * scale, sin * scale
    return cos, sin, layout, rotary_dim


def _inv_freq(rope: RotaryEmbedding, frequency_length: int | None) -> Tensor:
    """The rotary's float64 frequencies, or those of ``frequency_length`` (length-dependent)."""
    if frequency_length is None or rope.scaling is None:
        return rope.inv_freq("cpu")
    length = rope.frequency_length(frequency_length)
    return rope.scaling.inv_freq(rope.rotary_dim, rope.base, seq_len=length)


def _chunks(x: Tensor, pairs: int) -> list[tuple[int, int, Tensor]]:
    """``(start, stop, x[:, :, start:stop])``: views of about ``_CHUNK_PAIRS`` pairs each."""
    batch, heads, seq, _ = x.shape
    step = max(1, _CHUNK_PAIRS // max(1, batch * heads * pairs))
    return [
        (start, min(start + step, seq), x[:, :, start : min(start + step, seq)])
        for start in range(0, seq, step)
    ]


def _rows(table: Tensor, start: int, stop: int, dim: int = -2) -> Tensor:
    """Rows ``start:stop`` of a per-token table along ``dim``; a broadcast one as it is."""
    return table if table.shape[dim] == 1 else table.narrow(dim, start, stop - start)


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, layout: str, rotary_dim: int) -> None:
    """Rotate the pairs of ``x`` in place: ``(a, b) → (a·c − b·s, b·c + a·s)`` in float64,
    one rounding to ``x.dtype`` (float32 on MPS, which has no float64)."""
    a, b = pair_views(x, rotary_dim, layout)
    compute = torch.float32 if x.device.type == "mps" else torch.float64
    a64, b64 = a.to(compute, copy=True), b.to(compute, copy=True)
    cos, sin = cos.to(device=x.device, dtype=compute), sin.to(device=x.device, dtype=compute)
    new_a = (a64 * cos).addcmul_(b64, sin, value=-1)  # a·c − b·s
    new_b = b64.mul_(cos).addcmul_(a64, sin)  # b·c + a·s
    a.copy_(new_a)
    b.copy_(new_b)
