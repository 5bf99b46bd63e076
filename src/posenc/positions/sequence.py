"""Where positions come from: offsets (KV cache), padding, packed documents, grids, tensors.

An encoding with one position axis takes positions ``(seq,)`` or ``(batch, seq)``; an
encoding that declares ``num_axes = n > 1`` (M-RoPE's temporal, height and width ids) takes
``(n, seq)`` or ``(n, batch, seq)``, the layout of HF Qwen2-VL's ``position_ids``. Positions
are integer or floating (position interpolation makes fractional positions legal). Model,
attention and KV cache treat them as opaque apart from the last dimension being ``seq``.
The helpers here build those tensors for the common cases, :func:`check_positions`
validates a user's tensor, and :func:`next_positions` continues them after a KV cache.

Example::

    >>> positions_from_length(4, offset=10)
    tensor([10, 11, 12, 13])
    >>> positions_from_length(3, offset=torch.tensor([0, 5]))
    tensor([[0, 1, 2],
            [5, 6, 7]])
    >>> packed_positions(document_ids=torch.tensor([0, 0, 0, 1, 1, 2]))
    tensor([0, 1, 2, 0, 1, 0])
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc._validate import (
    check_integer_valued,
    check_non_negative_int,
    check_positive_int,
    validating_values,
)

__all__ = [
    "POSITION_LIMIT",
    "check_device",
    "check_padding_mask",
    "check_positions",
    "concat_positions",
    "cu_seqlens_to_document_ids",
    "document_mask",
    "grid_coordinates",
    "grid_positions",
    "next_positions",
    "packed_positions",
    "position_batch",
    "positions_from_length",
    "positions_from_padding_mask",
    "randomized_positions",
]


#: Positions must lie in ``[-POSITION_LIMIT, POSITION_LIMIT)``: then the difference of any two
#: fits int64 (relative encodings subtract them: ALiBi, T5, Shaw, XL, KV-cache continuation).
POSITION_LIMIT = 1 << 62


def check_positions(
    positions: Tensor,
    name: str = "positions",
    *,
    num_axes: int = 1,
    device: torch.device | None = None,
) -> Tensor:
    """Validate a positions tensor and return it unchanged.

    With ``num_axes == 1`` positions are ``(seq,)`` or ``(batch, seq)``; with ``num_axes =
    n > 1`` they are ``(n, seq)`` or ``(n, batch, seq)``. Integer or floating dtype (not bool
    or complex); finite, in ``[-2**62, 2**62)`` (:data:`POSITION_LIMIT`: the difference of
    two positions must fit int64, which relative encodings compute), checked eagerly with one
    host sync and skipped while compiling; on ``device`` when it is given (the device of the
    tensors the positions go with).

    Raises:
        ValueError: naming ``name`` for a wrong type, rank, axis count, dtype or device,
            NaN/inf, or a value out of range.
    """
    if not isinstance(positions, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    num_axes = check_positive_int("num_axes", num_axes)
    if num_axes == 1:
        if positions.dim() not in (1, 2):
            raise ValueError(
                f"{name} must have shape (seq,) or (batch, seq); got {tuple(positions.shape)}"
            )
    elif positions.dim() not in (2, 3) or positions.shape[0] != num_axes:
        raise ValueError(
            f"{name} must have shape ({num_axes}, seq) or ({num_axes}, batch, seq) for an "
            f"encoding with {num_axes} position axes; got {tuple(positions.shape)}"
        )
    if positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    check_device(name, positions, device)
    _check_range(name, positions)
    return positions


def check_device(name: str, tensor: Tensor, device: torch.device | None, what: str = "") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``tensor`` is on ``device`` (None: any)."""
    if device is not None and tensor.device != torch.device(device):
        where = what or "the device of the tensors it goes with"
        raise ValueError(
            f"{name} must be on {torch.device(device)} ({where}); got a tensor on "
            f"{tensor.device}: move it with .to({str(torch.device(device))!r})"
        )


def _check_range(name: str, positions: Tensor) -> None:
    """Finite and in ``[-POSITION_LIMIT, POSITION_LIMIT)``: one host sync, eager only."""
    if positions.numel() == 0 or positions.device.type == "meta" or not validating_values():
        return
    if not positions.is_floating_point() and positions.dtype != torch.int64:
        return  # narrower integers cannot leave the range (and would wrap the comparison)
    inside = (positions >= -POSITION_LIMIT) & (positions < POSITION_LIMIT)  # False for NaN
    if bool(inside.all()):
        return
    if positions.is_floating_point() and not bool(torch.isfinite(positions).all()):
        raise ValueError(f"{name} must be finite; it contains NaN or inf")
    low, high = torch.stack(torch.aminmax(positions)).tolist()
    raise ValueError(
        f"{name} must lie in [-2**62, 2**62) (so that differences of positions fit int64); "
        f"got values from {low} to {high}"
    )


def position_batch(positions: Tensor, num_axes: int = 1) -> int | None:
    """Batch size of a (validated) positions tensor, or None when it is shared by all rows."""
    batched_rank = 2 if num_axes == 1 else 3
    return positions.shape[-2] if positions.dim() == batched_rank else None


def _with_batch(positions: Tensor, batch: int, num_axes: int) -> Tensor:
    """``positions`` expanded to ``batch`` rows (a view when they are shared)."""
    if position_batch(positions, num_axes) is not None:
        return positions
    return positions.unsqueeze(-2).expand(*positions.shape[:-1], batch, positions.shape[-1])


def concat_positions(old: Tensor, new: Tensor, num_axes: int = 1) -> Tensor:
    """``old`` then ``new`` along ``seq`` (a KV cache growing); shared rows expand to a batch.

    Example::

        >>> concat_positions(torch.arange(3), torch.tensor([[3], [7]])).tolist()
        [[0, 1, 2, 3], [0, 1, 2, 7]]
    """
    old_batch, new_batch = position_batch(old, num_axes), position_batch(new, num_axes)
    if old_batch != new_batch:
        batch = old_batch if new_batch is None else new_batch
        assert batch is not None
        old, new = _with_batch(old, batch, num_axes), _with_batch(new, batch, num_axes)
    if old.dtype != new.dtype:
        dtype = torch.promote_types(old.dtype, new.dtype)
        old, new = old.to(dtype), new.to(dtype)
    return torch.cat([old, new.to(old.device)], dim=-1)


def next_positions(
    cached: Tensor | None,
    length: int,
    *,
    num_axes: int = 1,
    device: torch.device | str | None = None,
) -> Tensor:
    """Positions of ``length`` new tokens after the cached ones: ``max(cached) + 1 + arange``.

    The continuation reads the cached positions, not their count: after a left-padded prompt
    (pads at position 0) the next token follows the last real one, and an M-RoPE sequence
    whose image block spans fewer position ids than tokens continues at ``max + 1`` of all
    axes, as HF's ``get_rope_index`` does. Per-row caches continue per row. Every axis of a
    multi-axis encoding gets the same (text-like) positions. No host sync.

    Args:
        cached: positions already in the cache (any layout of :func:`check_positions`), or
            None / an empty tensor for an empty cache (positions then start at 0).
        length: number of new tokens (≥ 0).
        num_axes: position axes of the encoding.
        device: device of the result when ``cached`` is None.

    Returns:
        ``(length,)`` / ``(batch, length)``, with a leading ``num_axes`` dimension when
        ``num_axes > 1``; the dtype of ``cached`` (int64 for an empty cache).

    Example::

        >>> next_positions(torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]]), 2).tolist()
        [[2, 3], [4, 5]]
    """
    length = check_non_negative_int("length", length)
    if cached is None or cached.shape[-1] == 0:
        steps = torch.arange(length, device=device)
        if cached is not None and position_batch(cached, num_axes) is not None:
            steps = steps.expand(cached.shape[-2], length)
    else:
        last = cached.amax(dim=-1)  # (batch,) or () per axis
        if num_axes > 1:
            last = last.amax(dim=0)
        steps = (last + 1).unsqueeze(-1) + torch.arange(length, device=cached.device)
    if num_axes > 1:
        steps = steps.expand(num_axes, *steps.shape)
    return steps


def positions_from_length(
    length: int,
    offset: int | Tensor = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Positions ``offset, offset + 1, ..., offset + length - 1``.

    Args:
        length: number of new tokens (≥ 0).
        offset: tokens already in the KV cache. An ``int`` gives ``(length,)``; a tensor of
            shape ``(batch,)`` gives per-row offsets and ``(batch, length)`` positions
            (rows with different cache lengths).
        device: device of the result (defaults to the offset tensor's device).

    Returns:
        int64 tensor ``(length,)`` or ``(batch, length)``.
    """
    length = check_non_negative_int("length", length)
    if isinstance(offset, Tensor):
        if offset.dim() != 1 or offset.is_floating_point() or offset.dtype == torch.bool:
            raise ValueError(
                "offset must be an int or an integer tensor of shape (batch,); "
                f"got dtype {offset.dtype} and shape {tuple(offset.shape)}"
            )
        if bool((offset < 0).any()):
            raise ValueError("offset must be >= 0 in every row")
        device = offset.device if device is None else device
        steps = torch.arange(length, device=device)
        return offset.to(device=device, dtype=torch.long)[:, None] + steps
    offset = check_non_negative_int("offset", offset)
    return torch.arange(offset, offset + length, device=device)


def check_padding_mask(
    mask: object, name: str = "attention_mask", shape: tuple[int, ...] | None = None
) -> Tensor:
    """A padding mask (True or 1 = real token, False or 0 = padding), checked and returned
    as bool on its device.

    Bool, integer or floating tensors holding only 0 and 1 are accepted; anything else (a
    fractional 0.5, a 2, a NaN, an additive ``0 / -inf`` mask) would be counted as a real
    token by a cast to bool, so it raises. Shared by the position-id builders
    (:func:`positions_from_padding_mask`, M-RoPE's, VideoRoPE's and V2PE's ids).

    Args:
        mask: the tensor.
        name: the argument's name, for messages.
        shape: the shape it must have, or None (any).

    Raises:
        ValueError: naming ``name``: not a tensor, the wrong shape, complex, or values other
            than 0 and 1.
    """
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a tensor of 0/1 or bool, got {type(mask).__name__}")
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name} must have the shape {tuple(shape)}, got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex():
        raise ValueError(f"{name} must be bool or hold only 0 and 1, got {mask.dtype}")
    if validating_values() and mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError(
            f"{name} must be bool or hold only 0 and 1 (1 = real token, 0 = padding); it "
            "holds other values (a fractional, negative, NaN or additive -inf mask is not a "
            "padding mask)"
        )
    return mask != 0


def positions_from_padding_mask(mask: Tensor) -> Tensor:
    """Positions for left- (or right-) padded rows: count real tokens, pads get 0.

    ``mask`` is ``(batch, seq)`` bool or 0/1, True for real tokens. A real token's position
    is the number of real tokens before it in its row, so a left-padded row starts at 0 at
    its first real token (what HF ``generate`` does with ``attention_mask.cumsum(-1) - 1``).

    Raises:
        ValueError: naming ``mask`` (see :func:`check_padding_mask`).
    """
    if not isinstance(mask, Tensor) or mask.dim() != 2:
        raise ValueError("mask must be a (batch, seq) tensor")
    keep = check_padding_mask(mask, "mask").to(torch.long)
    return ((keep.cumsum(-1) - 1) * keep).clamp(min=0)


def cu_seqlens_to_document_ids(cu_seqlens: Tensor) -> Tensor:
    """Document id of every token from cumulative sequence lengths ``[0, l0, l0+l1, ...]``."""
    if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.numel() < 1:
        raise ValueError("cu_seqlens must be a non-empty 1-D integer tensor")
    if cu_seqlens.is_floating_point() or cu_seqlens.dtype == torch.bool:
        raise ValueError(f"cu_seqlens must be an integer tensor, got {cu_seqlens.dtype}")
    if int(cu_seqlens[0]) != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {int(cu_seqlens[0])}")
    lengths = cu_seqlens.diff()
    if bool((lengths < 0).any()):
        raise ValueError("cu_seqlens must be non-decreasing")
    ids = torch.arange(lengths.numel(), device=cu_seqlens.device)
    return torch.repeat_interleave(ids, lengths)


def packed_positions(
    document_ids: Tensor | None = None, *, cu_seqlens: Tensor | None = None
) -> Tensor:
    """Positions that restart at 0 at every document boundary of a packed sequence.

    Give exactly one of ``document_ids`` (``(seq,)`` or ``(batch, seq)``; a new document
    starts wherever the id changes) or ``cu_seqlens`` (flash-attention's cumulative lengths,
    ``(num_docs + 1,)``, for one packed row).

    Example::

        >>> packed_positions(cu_seqlens=torch.tensor([0, 3, 5]))
        tensor([0, 1, 2, 0, 1])
    """
    if (document_ids is None) == (cu_seqlens is None):
        raise ValueError("give exactly one of document_ids or cu_seqlens")
    if cu_seqlens is not None:
        document_ids = cu_seqlens_to_document_ids(cu_seqlens)
    assert document_ids is not None
    if document_ids.dim() not in (1, 2) or document_ids.is_floating_point():
        raise ValueError(
            "document_ids must be an integer tensor of shape (seq,) or (batch, seq); "
            f"got dtype {document_ids.dtype} and shape {tuple(document_ids.shape)}"
        )
    seq = document_ids.shape[-1]
    index = torch.arange(seq, device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[..., 1:] = document_ids[..., 1:] != document_ids[..., :-1]
    # Index of the most recent document start at or before each token.
    start_index = torch.where(starts, index, torch.zeros_like(index)).cummax(-1).values
    return index - start_index


def document_mask(document_ids: Tensor, k_document_ids: Tensor | None = None) -> Tensor:
    """Boolean ``(..., q_len, k_len)`` mask, True where query and key are in one document.

    Pass it as ``attn_mask`` to :class:`posenc.attention.Attention` for packed sequences, so
    that tokens never attend across a document boundary.
    """
    for name, ids in (("document_ids", document_ids), ("k_document_ids", k_document_ids)):
        if ids is not None and (
            not isinstance(ids, Tensor)
            or ids.dim() not in (1, 2)
            or ids.is_floating_point()
            or ids.dtype == torch.bool
        ):
            got = f"{ids.dtype} {tuple(ids.shape)}" if isinstance(ids, Tensor) else type(ids)
            raise ValueError(f"{name} must be an integer tensor (seq,) or (batch, seq); got {got}")
    k_ids = document_ids if k_document_ids is None else k_document_ids
    check_device("k_document_ids", k_ids, document_ids.device)
    batches = (document_ids.shape[0], k_ids.shape[0])
    if document_ids.dim() == k_ids.dim() == 2 and 1 not in batches and len(set(batches)) > 1:
        raise ValueError(
            f"k_document_ids must have the batch of document_ids ({batches[0]}) or 1; got "
            f"{batches[1]}"
        )
    return document_ids[..., :, None] == k_ids[..., None, :]


def randomized_positions(
    length: int,
    max_length: int,
    *,
    batch: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Randomized positions (Ruoss et al.): ``length`` distinct sorted ints in ``[0, max_length)``.

    Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization of
    Transformers" (https://arxiv.org/abs/2305.16843): in training, replace ``0 .. length - 1``
    by a uniformly random subset of ``length`` positions of a larger range ``max_length`` ≥
    every test length, kept in increasing order, so that the model sees every position up to
    ``max_length`` while keeping the order of tokens. Each row is an independent subset,
    drawn as the first ``length`` entries of a random permutation of ``range(max_length)``.

    Args:
        length: number of positions per row (≥ 0).
        max_length: size of the range to sample from (≥ ``length``).
        batch: rows to draw; None gives a single ``(length,)`` row.
        generator: optional ``torch.Generator`` (the draw runs on its device).
        device: device of the result (defaults to the generator's device, else CPU).

    Returns:
        int64 tensor ``(length,)`` or ``(batch, length)``, strictly increasing along the last axis.

    Raises:
        ValueError: naming ``length`` and ``max_length`` when ``length > max_length``, or the
            argument that is not a valid integer.

    Example::

        >>> randomized_positions(4, 100, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([4])
    """
    length = check_non_negative_int("length", length)
    max_length = check_positive_int("max_length", max_length)
    if length > max_length:
        raise ValueError(
            f"length must be <= max_length to draw distinct positions; "
            f"got length={length}, max_length={max_length}"
        )
    if batch is not None:
        batch = check_positive_int("batch", batch)
    rows = 1 if batch is None else batch
    draw_device = generator.device if generator is not None else device
    noise = torch.rand(rows, max_length, generator=generator, device=draw_device)
    positions = noise.argsort(dim=-1)[:, :length].sort(dim=-1).values  # (rows, length)
    positions = positions.to(device=device if device is not None else positions.device)
    return positions[0] if batch is None else positions


def grid_coordinates(
    positions: Tensor, height: int, width: int, *, name: str = "positions"
) -> tuple[Tensor, Tensor]:
    """Row and column of row-major token indices on a ``height × width`` grid.

    .. math:: r = \\lfloor t / W \\rfloor, \\quad c = t \\bmod W

    Args:
        positions: whole-number token indices in ``[0, height · width)``, ``(seq,)`` or
            ``(batch, seq)``, integer or floating.
        height, width: the grid (≥ 1 each).
        name: the argument name used in error messages.

    Returns:
        ``(rows, cols)``, int64 tensors of the shape of ``positions``.

    Raises:
        ValueError: naming ``name`` and the grid when an index is fractional or outside
            ``[0, height · width)``.

    Example::

        >>> grid_coordinates(torch.tensor([0, 5, 7]), height=2, width=4)
        (tensor([0, 1, 1]), tensor([0, 1, 3]))
    """
    height = check_positive_int("height", height)
    width = check_positive_int("width", width)
    check_positions(positions, name)
    check_integer_valued(name, positions)
    if positions.numel() > 0 and validating_values() and positions.device.type != "meta":
        low, high = torch.stack(torch.aminmax(positions)).tolist()  # one device sync
        if low < 0 or high >= height * width:
            raise ValueError(
                f"{name} must be token indices in [0, {height * width}) of the "
                f"(height={height}, width={width}) grid; got values in [{low:g}, {high:g}]"
            )
    index = positions.to(torch.long)
    return torch.div(index, width, rounding_mode="floor"), index % width


def grid_positions(
    *sizes: int, offset: int = 0, device: torch.device | str | None = None
) -> Tensor:
    """Multi-axis positions of every cell of a grid, row-major: ``(len(sizes), prod(sizes))``.

    Axis ``a`` of token ``t`` is its coordinate along ``sizes[a]`` plus ``offset``, the
    layout multi-axis encodings (M-RoPE's ``(t, h, w)``) read.

    Example::

        >>> grid_positions(2, 3).tolist()
        [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    """
    if not sizes:
        raise ValueError("sizes must name at least one grid axis")
    sizes = tuple(check_positive_int(f"sizes[{index}]", size) for index, size in enumerate(sizes))
    offset = check_non_negative_int("offset", offset)
    axes = [torch.arange(size, device=device) for size in sizes]
    mesh = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh]) + offset
