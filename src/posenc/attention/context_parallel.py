"""Context parallelism: one sequence split over ranks, attention on global positions.

Each of ``R`` ranks holds ``L / R`` tokens of one sequence, cut by the zigzag permutation
(:mod:`posenc.positions.zigzag`: rank ``r`` holds chunks ``r`` and ``2R − r − 1`` of ``2R``).
Every tensor indexed by the sequence is cut the same way: q, k, v, the positions (``(seq,)``,
``(batch, seq)`` or M-RoPE's ``(3, …, seq)``), document ids and key padding. The attention
of a rank's queries is then exact for every encoding because:

* rotary encodings rotate the local q and k at their *global* positions (the shard of the
  positions tensor); a length-dependent one first follows the whole sequence's positions,
  as the one-rank forward does;
* keys and values are all-gathered, **with their global positions** (maxtext#4537's
  ``kv_sequence``), document ids and padding, and put back in sequence order;
* under causal attention each local chunk ``c`` (tokens ``[c s, (c + 1) s)``) attends to the
  keys ``[0, (c + 1) s)``: its queries are the last keys, the KV-cache case posenc's
  :func:`~posenc.attention.attend` defines for every family, so biases read global
  ``q_pos``/``k_pos``, document masks compare global ids, and scores readers that need whole
  rows (CoPE, DAPE) and segment methods get them;
* bidirectional attention: the local queries attend to every key, their documents compared
  by a mask predicate on global ids.

The gather is differentiable: its backward reduce-scatters the keys' and values' gradients
back to the ranks that hold them. Every parameter (an encoding's, a layer's projections)
gets a partial gradient on each rank, whose sum over the group is the one-rank gradient: DDP
and FSDP *average* over their group, so under them scale each rank's loss by the group's size.
Gathering every key costs ``O(L)`` memory per rank for K and V (a ring would pass them in
``R`` steps); it is the simple, exact path. Refused, as :func:`~posenc.attention.attend`
refuses them: encodings that read the layer's hidden states (FoX's ``token_state``, PaTH's
``token_transforms``, CARoPE's ``token_phases``) and
PoPE, whose rotation widens q and k beyond ``head_dim``.

Example (two processes, ``posenc.lab.distributed.spawn``)::

    >>> cp = ContextParallel.from_group()                # rank and world of the group
    >>> q, k, v = (cp.shard(t, dim=-2) for t in (q_full, k_full, v_full))
    >>> positions = cp.shard(torch.arange(seq_len), dim=-1)
    >>> q, k, v = cp.rotate(rope, q, k, v, positions)
    >>> out = cp.attend(q, k, v, pos=rope, positions=positions, causal=True)
    >>> cp.unshard(out, dim=-2)                          # equals the one-rank attention
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from posenc._validate import check_int, check_positive_int
from posenc.attention.backends import Backend
from posenc.attention.functional import attend
from posenc.attention.module import Attention
from posenc.encoding.resolve import hooks_of
from posenc.positions.zigzag import zigzag_chunks, zigzag_shard, zigzag_unshard

__all__ = ["ContextParallel"]


class _GatherSequence(torch.autograd.Function):
    """All-gather the shards of ``x`` along ``dim`` into the whole sequence; backward sums
    each rank's gradient of the whole sequence and hands every rank its shard."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, dim: int, world_size: int, group: Any) -> Tensor:
        ctx.dim, ctx.world_size, ctx.group = dim, world_size, group
        parts = [torch.empty_like(x) for _ in range(world_size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return zigzag_unshard(parts, dim)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        dim, world_size, group = ctx.dim, ctx.world_size, ctx.group
        pieces = [zigzag_shard(grad, r, world_size, dim).contiguous() for r in range(world_size)]
        out = torch.empty_like(pieces[0])
        dist.reduce_scatter(out, pieces, group=group)
        return out, None, None, None


@dataclass(frozen=True)
class ContextParallel:
    """One rank's view of a sequence split over a process group by the zigzag permutation.

    Args:
        rank, world_size: this rank and the group's size, ``0 <= rank < world_size``.
        group: the process group (None: the default group).

    Local tensors are the shards :meth:`shard` cuts; a local sequence has ``L / world_size``
    tokens, chunks ``rank`` and ``2 world_size − rank − 1`` of ``L / (2 world_size)`` each.
    """

    rank: int
    world_size: int
    group: Any = None

    def __post_init__(self) -> None:
        check_positive_int("world_size", self.world_size)
        check_int("rank", self.rank, 0, self.world_size - 1)

    @classmethod
    def from_group(cls, group: Any = None) -> ContextParallel:
        """The view of the current process in ``group`` (the default group when None)."""
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError("group: torch.distributed is not initialized (init_process_group)")
        return cls(dist.get_rank(group), dist.get_world_size(group), group)

    def shard(self, x: Tensor, dim: int) -> Tensor:
        """This rank's part of a whole-sequence tensor ``x`` along ``dim`` (no communication)."""
        return zigzag_shard(x, self.rank, self.world_size, dim)

    def unshard(self, x: Tensor, dim: int) -> Tensor:
        """The whole sequence from every rank's ``x`` (an all-gather, differentiable);
        integer and bool tensors travel as they are, without gradient."""
        if self.world_size == 1:
            return x
        if x.is_floating_point() and x.requires_grad:
            out: Tensor = _GatherSequence.apply(x, dim, self.world_size, self.group)
            return out
        parts = [torch.empty_like(x) for _ in range(self.world_size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return zigzag_unshard(parts, dim)

    def rotate(
        self, pos: nn.Module | None, q: Tensor, k: Tensor, v: Tensor, positions: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Rotate local q and k (and v, for a value rotation) at their global ``positions``
        (this rank's shard), as :class:`~posenc.attention.Attention` rotates the whole
        sequence. A length-dependent rotary first follows the whole sequence's positions
        (gathered); a segment method rotates inside :meth:`attend`, so q, k, v come back as
        they are; an encoding without rotation returns them too.
        """
        hooks = hooks_of(pos)
        rotary = hooks.rotary
        if rotary is None or hooks.segments is not None:
            return q, k, v
        if hooks.per_query_lengths:
            raise ValueError(
                f"pos: {hooks.name} picks frequencies per query length (the 'query' rule); "
                "context parallelism supports the 'forward' rule only"
            )
        if rotary.depends_on_length:  # follow max(global positions) + 1, then read
            rotary.rotary_tables(self.unshard(positions, dim=-1), q.dtype)
            tables = rotary.rotary_tables(positions, q.dtype, update=False)
        else:
            tables = rotary.rotary_tables(positions, q.dtype)
        q, k = rotary.rotate_qk(q, k, tables, tables)
        if hooks.value_rotation is not None:
            v = hooks.value_rotation.rotate_values(v, tables)
        return q, k, v

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        pos: nn.Module | None = None,
        positions: Tensor,
        causal: bool,
        key_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
        scale: float | None = None,
        backend: str | Backend = "sdpa",
    ) -> Tensor:
        """This rank's queries against every key of the sequence: :func:`~posenc.attention.attend`
        on local shards, equal to the shard of the one-rank attention.

        Args:
            q, k, v: local shards ``(batch, heads, L / R, head_dim)``, rotated as
                :meth:`rotate` rotates them (unrotated for a segment method).
            pos: the encoding whose bias, contextual term or scores reader enters the logits.
            positions: the local shard of the global positions, ``(L / R,)``, ``(batch,
                L / R)`` or ``(axes, …, L / R)``.
            causal: decoder attention (each query sees the keys up to its global index).
            key_padding_mask: local shard ``(batch, L / R)``, True for real tokens.
            document_ids: local shard ``(L / R,)`` or ``(batch, L / R)`` of packed-document
                ids; tokens attend within their document only.
            scale, backend: as :func:`~posenc.attention.attend`.

        Returns:
            ``(batch, heads, L / R, v_dim)``, this rank's queries in local order.

        Raises:
            ValueError: naming the argument: a local length that is not even (two chunks),
                positions or masks whose last axis is not the local length; and whatever
                :func:`~posenc.attention.attend` refuses.
        """
        hooks = hooks_of(pos)
        if hooks.token_phases is not None:
            raise ValueError(
                f"pos: {hooks.name} rotates q and k by phases accumulated over every earlier "
                "token of the layer's input (token_phases), which the ranks do not share; "
                "context parallelism does not serve it: run it on one rank"
            )
        local = q.shape[-2]
        if local % 2 != 0 or k.shape[-2] != local:
            raise ValueError(
                f"q and k must be local shards of one length holding two zigzag chunks (an even "
                f"length); got q_len={local}, k_len={k.shape[-2]}"
            )
        for name, tensor in (
            ("positions", positions),
            ("key_padding_mask", key_padding_mask),
            ("document_ids", document_ids),
        ):
            if tensor is not None and (tensor.dim() == 0 or tensor.shape[-1] != local):
                raise ValueError(
                    f"{name} must be this rank's shard with {local} entries in its last axis; "
                    f"got shape {tuple(tensor.shape)}"
                )
        k_all, v_all = self.unshard(k, -2), self.unshard(v, -2)
        k_pos = self.unshard(positions, -1)
        padding = None if key_padding_mask is None else self.unshard(key_padding_mask, -1)
        documents = None if document_ids is None else self.unshard(document_ids, -1)
        common: dict[str, Any] = {"pos": pos, "scale": scale, "backend": backend}
        if not causal:
            predicate = None if document_ids is None else _same_document(document_ids, documents)
            return attend(
                q,
                k_all,
                v_all,
                q_pos=positions,
                k_pos=k_pos,
                causal=False,
                key_padding_mask=padding,
                attn_mask=predicate,
                **common,
            )
        size = local // 2
        outs = []
        for half, chunk in enumerate(zigzag_chunks(self.rank, self.world_size)):
            end = (chunk + 1) * size  # keys [0, end): this chunk's queries are the last ones
            outs.append(
                attend(
                    q[..., half * size : (half + 1) * size, :],
                    k_all[..., :end, :],
                    v_all[..., :end, :],
                    q_pos=positions[..., half * size : (half + 1) * size],
                    k_pos=k_pos[..., :end],
                    causal=True,
                    key_padding_mask=None if padding is None else padding[:, :end],
                    document_ids=None if documents is None else documents[..., :end],
                    **common,
                )
            )
        return torch.cat(outs, dim=-2)

    def attention(
        self,
        layer: Attention,
        x: Tensor,
        positions: Tensor,
        *,
        key_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """One :class:`~posenc.attention.Attention` layer on this rank's tokens: its
        projections, query scale and rotation on the local ``x``, then :meth:`attend`.

        Equal to the shard of ``layer(x_whole, positions_whole, ...)``, without dropout
        (a rank cannot draw the one-rank run's mask), KV cache, ``chunk_size``, the linear
        backend or a randomized position transform (CAPE in training).

        Args:
            layer: the attention layer (its parameters as on one rank).
            x: ``(batch, L / R, dim)``, this rank's shard of the layer's input.
            positions, key_padding_mask, document_ids: local shards, as :meth:`attend`.

        Returns:
            ``(batch, L / R, dim)``.
        """
        hooks = layer.hooks
        if layer.backend.name == "linear" or layer.chunk_size is not None:
            raise ValueError(
                "layer: context parallelism supports softmax attention without chunk_size; "
                f"got backend={layer.backend.name!r}, chunk_size={layer.chunk_size}"
            )
        if hooks.position_transform is not None and layer.training:
            raise ValueError(
                f"layer: {hooks.name} draws random positions in training, which every rank "
                "would draw differently; randomize the positions before sharding them"
            )
        if layer.training and layer.dropout > 0:
            raise ValueError(f"layer: dropout={layer.dropout} in training; use dropout=0")
        batch, seq, _ = x.shape
        heads, kv_heads, width = layer.num_heads, layer.num_kv_heads, layer.head_dim
        q = layer.q_proj(x).view(batch, seq, heads, width).transpose(1, 2)
        if layer.query_scale is not None:
            q = layer.query_scale.apply(q, positions)
        k = layer.k_proj(x).view(batch, seq, kv_heads, width).transpose(1, 2)
        v = layer.v_proj(x).view(batch, seq, kv_heads, width).transpose(1, 2)
        q, k, v = self.rotate(layer.pos, q, k, v, positions)
        out = self.attend(
            q,
            k,
            v,
            pos=layer.pos,
            positions=positions,
            causal=layer.causal,
            key_padding_mask=key_padding_mask,
            document_ids=document_ids,
            scale=layer.scale,
            backend=layer.backend,
        )
        out = out.transpose(1, 2).reshape(batch, seq, heads * width)
        projected: Tensor = layer.out_proj(out)
        return projected


def _same_document(q_docs: Tensor, k_docs: Tensor | None) -> Any:
    """A ``mask_mod`` true where local query ``q_idx`` and key ``kv_idx`` (global order) share
    a document; ids ``(seq,)`` or ``(batch, seq)``."""
    assert k_docs is not None

    def mask_mod(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        if q_docs.dim() == 2:
            return q_docs[b, q_idx] == k_docs[b, kv_idx]
        return q_docs[q_idx] == k_docs[kv_idx]

    return mask_mod
