"""RoPE's two pair layouts: which channels form a pair, and converting between them.

Of the first ``rotary_dim = d`` channels of a head (the rest pass through):

* ``"half"`` (GPT-NeoX, HF Llama): pair ``i`` is ``(i, i + d/2)``;
* ``"interleaved"`` (GPT-J, Meta Llama, RoFormer): pair ``i`` is ``(2i, 2i + 1)``.

:func:`pair_views` gives the two members of every pair as views (the rotation kernels and
the cos/sin tables read them).

Both rotate pair ``i`` with frequency ``θ_i``. Moving channel ``2i`` to ``i`` and ``2i + 1``
to ``i + d/2`` turns one into the other, so a checkpoint trained in one layout runs in the
other once the rows of its q and k projections are permuted (HF's Llama converter does this
with ``view(heads, d/2, 2, in).transpose(1, 2)``). The attention scores are unchanged because
q and k are permuted alike.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_int
from posenc.rotary.frequencies import check_rotary_dim, resolve_rotary_dim

__all__ = [
    "LAYOUTS",
    "Layout",
    "pair_views",
    "permute_rotary_weight",
    "rotary_channel_permutation",
]

Layout = Literal["half", "interleaved"]
LAYOUTS: tuple[str, ...] = get_args(Layout)


def pair_views(x: Tensor, rotary_dim: int, layout: str) -> tuple[Tensor, Tensor]:
    """The two members of every pair of the first ``rotary_dim`` channels, as views of ``x``.

    ``(x[..., :d/2], x[..., d/2:d])`` for ``"half"``, ``(x[..., 0:d:2], x[..., 1:d:2])`` for
    ``"interleaved"``; no checks (the hot path).

    Example::

        >>> a, b = pair_views(torch.arange(4), 4, "interleaved")
        >>> a.tolist(), b.tolist()
        ([0, 2], [1, 3])
    """
    if layout == "half":
        return x[..., : rotary_dim // 2], x[..., rotary_dim // 2 : rotary_dim]
    return x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]


def rotary_channel_permutation(
    rotary_dim: int,
    src: Layout,
    dst: Layout,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Index ``perm`` with ``x_dst = x_src[..., perm]`` for one head's rotated channels.

    interleaved → half: ``[0, 2, 4, ..., d-2, 1, 3, ..., d-1]``; half → interleaved:
    ``[0, d/2, 1, d/2 + 1, ...]``; equal layouts give the identity.

    Args:
        rotary_dim: rotated channels ``d`` per head; even and ≥ 2.
        src: layout of the input channels, ``"half"`` or ``"interleaved"``.
        dst: layout wanted.
        device: device of the result.

    Shape:
        Output: int64 ``(rotary_dim,)``.

    Example::

        >>> rotary_channel_permutation(6, "interleaved", "half")
        tensor([0, 2, 4, 1, 3, 5])
    """
    check_rotary_dim(rotary_dim)
    check_in_choices("src", src, LAYOUTS)
    check_in_choices("dst", dst, LAYOUTS)
    index = torch.arange(rotary_dim, device=device)
    if src == dst:
        return index
    if src == "interleaved":  # dst half: channel j < d/2 reads 2j, channel d/2 + j reads 2j + 1
        return index.view(rotary_dim // 2, 2).t().reshape(rotary_dim)
    # dst interleaved: channel 2j reads j, channel 2j + 1 reads d/2 + j
    return index.view(2, rotary_dim // 2).t().reshape(rotary_dim)


def permute_rotary_weight(
    weight: Tensor,
    num_heads: int,
    head_dim: int,
    *,
    rotary_dim: int | None = None,
    src: Layout = "interleaved",
    dst: Layout = "half",
) -> Tensor:
    """Permute a q or k projection so that a checkpoint in layout ``src`` runs with ``dst``.

    Within each head the first ``rotary_dim`` output rows are reordered by
    :func:`rotary_channel_permutation`; the pass-through rows of a partial rotary stay.
    Apply it to the q and k weights (and biases) of every layer; v and the output projection
    are unchanged. Then ``rope_dst(W' x)`` equals ``rope_src(W x)`` up to that channel
    permutation, and the scores ``q · k`` are identical.

    Args:
        weight: ``(num_heads * head_dim, in_features)`` weight or ``(num_heads * head_dim,)``
            bias, heads outermost (as in ``nn.Linear`` of HF and Meta checkpoints).
        num_heads: heads in this projection (the KV heads for k under GQA).
        head_dim: channels per head.
        rotary_dim: rotated channels per head (defaults to ``head_dim``), even.
        src: layout the checkpoint was trained with.
        dst: layout it will run with.

    Shape:
        Output: same shape as ``weight`` (a new tensor).

    Example::

        >>> w = torch.randn(2 * 4, 16)  # two heads of 4 channels
        >>> permute_rotary_weight(w, 2, 4).shape
        torch.Size([8, 16])
    """
    num_heads = check_positive_int("num_heads", num_heads)
    rotary_dim = resolve_rotary_dim(head_dim, rotary_dim)
    if not isinstance(weight, Tensor) or weight.dim() not in (1, 2):
        raise ValueError(
            "weight must be a (num_heads * head_dim, in_features) weight or a "
            "(num_heads * head_dim,) bias"
        )
    if weight.shape[0] != num_heads * head_dim:
        raise ValueError(
            f"weight has {weight.shape[0]} rows but num_heads * head_dim = "
            f"{num_heads} * {head_dim} = {num_heads * head_dim}"
        )
    perm = rotary_channel_permutation(rotary_dim, src, dst, device=weight.device)
    rest = torch.arange(rotary_dim, head_dim, device=weight.device)
    per_head = torch.cat((perm, rest))  # (head_dim,)
    heads = weight.reshape(num_heads, head_dim, *weight.shape[1:])
    return heads[:, per_head].reshape(weight.shape)
