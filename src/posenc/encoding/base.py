"""The hooks through which a positional encoding enters a transformer.

An encoding is a :class:`torch.nn.Module` that implements the hooks it needs. The model and
:class:`posenc.attention.Attention` look for the methods (duck typing, see
:class:`posenc.attention.hooks.Hooks`), never at a family name, so a new kind of method is
one new class, and one encoding may implement several hooks.

=================  ====================================================================
hook               methods
=================  ====================================================================
additive           ``position_embedding(positions) -> (..., seq, dim)``; the model adds
                   it to the token embeddings.
rotary             ``rotary_tables(positions, dtype)`` (built once per forward) and
                   ``rotate_qk(q, k, q_tables, k_tables) -> (q, k)``; q and k may have
                   different lengths (KV cache). Optional keyword ``inplace``: the
                   attention passes ``inplace=True`` when no gradient is needed.
                   Optional keyword ``update`` of ``rotary_tables``: an encoding whose
                   frequencies follow the length (``depends_on_length``) takes
                   ``update=False`` for tables at its current frequencies (keys read from
                   an unrotated KV cache, a segment's mapped positions).
segments           ``segments()`` with the rotary hooks (a
                   :class:`~posenc.segments.SegmentedRotary`): each (query, key) pair is
                   rotated at the positions of the segment holding it; optional
                   ``query_scale(positions)`` (log-n) and ``keeps(k_pos, q_min)`` (what a
                   rolling KV cache keeps).
pointwise bias     ``bias_at(head, q_pos, k_pos, dtype) -> bias``, written with
                   broadcastable ops; the materialized bias and FlexAttention's
                   ``score_mod`` are both derived from it. ``num_heads``. Optional
                   ``bias_grid(q_pos, k_pos, dtype)``: the same values on the whole
                   grid by a cheaper route (FIRE's MLP as its linear pieces); the
                   materialized paths use it, ``score_mod`` keeps ``bias_at``.
contextual term    ``logit_term(q, k, q_pos, k_pos, scale)`` (reads q or k: Shaw,
                   Transformer-XL, DeBERTa) and optionally ``value_term(probs, q_pos,
                   k_pos)`` with ``has_value_term = True``.
scores reader      ``transform_scores(scores, *, q, k, q_pos, k_pos, allowed)``: gets the
                   scaled content (+ bias) scores of complete rows of all heads and returns
                   new ones (CoPE, DAPE/CAPE); attention applies the mask after it.
                   Optional ``scores_term(...)`` (same arguments): what it adds to
                   the scores, which a flash kernel computing ``scale · q kᵀ`` itself
                   takes as its mask (the chunked backend without gradients).
score map          ``map_scores(scores) -> scores``: elementwise, after the scaling and the
                   terms above, before the mask (Gemma 2's soft-capping,
                   :class:`~posenc.softmax.SoftCap`); FlexAttention's ``score_mod`` takes it.
sink logits        ``sink_logits(dtype, device) -> (heads,)``: a logit per head joins each
                   row's softmax with no value (gpt-oss, :class:`~posenc.softmax.LearnedSinks`).
                   Both come from wrappers around an encoding
                   (:mod:`posenc.softmax.wrapping`).
token state        ``token_state(x, previous, real) -> (batch, heads, seq)`` and
                   ``state_bias(q_state, k_state) -> bias`` (broadcastable): a bias from the
                   layer's input ``x`` of the new tokens, continuing ``previous`` (the last
                   cached key's state); ``real`` marks non-padding tokens. The KV cache keeps
                   every key's state (FoX, :mod:`posenc.token_state.token_bias`).
attention weights  ``attention_weights(scores, visible) -> weights`` in place of the softmax
                   and ``remainder_term(remaining)`` for the mass no key took;
                   ``attend_current`` (stick-breaking, :mod:`posenc.softmax.stick_breaking`).
logit scale        ``logit_scale(head_dim) -> float`` (default ``head_dim ** -0.5``).
token embedding    ``embed_tokens(tokens, positions) -> (..., seq, dim)``: replaces the
                   model's token embedding (complex-order embeddings read the token ids).
projections        ``bind_projections(q_proj, k_proj)``: Attention hands the layer's q and
                   k projections at construction (DeBERTa's shared position keys).
per-layer copy     ``new_layer()``: the model builds the later layers' encodings with it,
                   sharing what the method shares (DeBERTa's relative table).
=================  ====================================================================

State and initialization (the ``torch.nn`` convention): an encoding keeps its parameters as
``nn.Parameter`` and implements ``reset_parameters()``, which draws exactly what its
constructor draws (so a seed gives the same encoding either way); constants that follow from
the constructor's arguments (RoPE's frequencies, ALiBi's slopes, a Fourier matrix) are never
buffers: they are built in float64 on the CPU and memoised per device outside
``state_dict`` and ``Module._apply``, so ``model.to(torch.bfloat16)`` cannot round them and a
model built on the ``meta`` device and materialized with ``to_empty`` has nothing to restore
but its parameters (``model.reset_parameters()`` or ``load_state_dict``). Learnable
frequencies (RoPE-Mixed, complex-order embeddings) are parameters: a dtype cast rounds them as
it rounds every weight.

Hot-path hooks (``rotary_tables``, ``rotate_qk``, ``bias_at``, ``logit_term``,
``value_term``, ``transform_scores``) do no value checks: inputs are validated once, at the
public boundary (the model, :class:`~posenc.attention.Attention`, an encoding's own
``forward``). Shapes follow :func:`torch.nn.functional.scaled_dot_product_attention`: q, k,
v are ``(batch, heads, seq, head_dim)``; positions ``(seq,)`` or ``(batch, seq)``, or with a
leading axis dimension for encodings with ``num_axes > 1``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor, nn
from torch.nn.utils import skip_init

from posenc.positions import check_positions

__all__ = [
    "AdditiveEncoding",
    "BiasEncoding",
    "ContextualEncoding",
    "EncodingWrapper",
    "NoPE",
    "PositionalEncoding",
    "RotaryEncoding",
    "check_rotary_input",
    "empty_linear",
    "materialize_bias",
    "state_device",
]


class PositionalEncoding(nn.Module):
    """Base of every encoding: how many position axes it reads, whether layers share it and
    whether it is defined for causal attention only."""

    #: Position axes the encoding reads: 1 gives positions ``(seq,)`` / ``(batch, seq)``,
    #: ``n > 1`` gives ``(n, seq)`` / ``(n, batch, seq)`` (M-RoPE's t, h, w).
    num_axes: int = 1
    #: True when the method is defined for causal (decoder) attention only (xPos's decay
    #: grows for keys after the query; CoPE counts gates over earlier keys; the segment
    #: methods): bidirectional attention refuses it (``ValueError`` naming ``pos``).
    causal_only: ClassVar[bool] = False
    #: True when one instance serves every layer (T5's table; parameter-free encodings, whose
    #: per-forward tables are then built once for the whole model).
    shared_across_layers: ClassVar[bool] = False


class EncodingWrapper(nn.Module):
    """A module holding an encoding as ``self.encoding`` that reads what it lacks from it.

    Attribute lookup finds parameters, buffers and submodules first (``nn.Module``), then
    the wrapped encoding's attributes: its hooks, ``num_heads``, ``head_dim``,
    ``shared_across_layers`` … Private names and ``encoding`` itself are never delegated.
    Base of :class:`~posenc.encoding.randomized.RandomizedPositions` and the softmax wrappers
    (:class:`~posenc.softmax.wrapping.SoftmaxWrapper`).
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_") or name == "encoding":
                raise
            return getattr(self._modules["encoding"], name)


class NoPE(PositionalEncoding):
    """No positional encoding (Kazemnejad et al. 2023, https://arxiv.org/abs/2305.19466).

    Only meaningful with a causal mask: bidirectional attention without positions is
    permutation-equivariant.
    """

    shared_across_layers: ClassVar[bool] = True


class AdditiveEncoding(PositionalEncoding):
    """``x + P(positions)``: ``forward(positions) -> (..., seq, dim)``."""

    dim: int

    def position_embedding(self, positions: Tensor) -> Tensor:
        """The additive hook: ``P(positions)``, ``(..., seq, dim)``."""
        return self(positions)


class RotaryEncoding(PositionalEncoding):
    """Rotates q and k by their positions.

    Subclasses implement the two hot-path hooks; :meth:`forward` is the validated public
    call ``forward(q, k, q_pos, k_pos) -> (q, k)``.
    """

    head_dim: int
    shared_across_layers: ClassVar[bool] = True

    def rotary_tables(self, positions: Tensor, dtype: torch.dtype) -> Any:
        """Whatever :meth:`rotate_qk` needs for ``positions`` (cos/sin tables), in ``dtype``.

        Called once per model forward for the new tokens; no value checks.
        """
        raise NotImplementedError

    def rotate_qk(
        self, q: Tensor, k: Tensor, q_tables: Any, k_tables: Any, *, inplace: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Rotate q with ``q_tables`` and k with ``k_tables`` (from :meth:`rotary_tables`).

        ``inplace=True`` may overwrite q and k (the attention asks for it when no gradient is
        needed: its q and k are fresh projections); an encoding may still return new tensors.
        """
        raise NotImplementedError

    def check_rotary_call(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> None:
        """Validate a public call (shapes, dtypes, positions); errors name the argument."""
        owner = type(self).__name__
        check_rotary_input(q, q_pos, self.head_dim, "q", "q_pos", owner, self.num_axes)
        check_rotary_input(k, k_pos, self.head_dim, "k", "k_pos", owner, self.num_axes)

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        """Rotate q by ``q_pos`` and k by ``k_pos``; returns ``(q_rot, k_rot)``."""
        self.check_rotary_call(q, k, q_pos, k_pos)
        q_tables = self.rotary_tables(q_pos, q.dtype)
        same = k_pos is q_pos and k.dtype == q.dtype  # self-attention: build the tables once
        k_tables = q_tables if same else self.rotary_tables(k_pos, k.dtype)
        return self.rotate_qk(q, k, q_tables, k_tables)


def check_rotary_input(
    x: Tensor,
    positions: Tensor,
    head_dim: int,
    name: str,
    pos_name: str,
    owner: str,
    num_axes: int = 1,
) -> None:
    """Check one rotary call's tensor and positions; errors name ``name`` / ``pos_name``.

    ``x`` must be a floating ``(batch, heads, seq, head_dim)`` tensor; ``positions`` valid
    (:func:`posenc.positions.check_positions`) on ``x``'s device, with ``seq`` entries and a
    batch of 1 or ``x``'s.
    """
    if not isinstance(x, Tensor) or x.dim() != 4 or not x.is_floating_point():
        raise ValueError(f"{name} must be a floating tensor (batch, heads, seq, head_dim)")
    if x.shape[-1] != head_dim:
        raise ValueError(
            f"{name} has last dim {x.shape[-1]} but this {owner} has head_dim {head_dim}"
        )
    check_positions(positions, pos_name, num_axes=num_axes, device=x.device)
    if positions.shape[-1] != x.shape[-2]:
        raise ValueError(
            f"{pos_name} has {positions.shape[-1]} positions but {name} has seq {x.shape[-2]}"
        )
    batched = positions.dim() == (2 if num_axes == 1 else 3)
    if batched and positions.shape[-2] not in (1, x.shape[0]):
        raise ValueError(
            f"{pos_name} has batch {positions.shape[-2]} but {name} has batch {x.shape[0]}"
        )


class BiasEncoding(PositionalEncoding):
    """Adds a pointwise bias ``b(head, q_pos, k_pos)`` to the scaled attention logits.

    Subclasses write :meth:`bias_at` once; :meth:`bias` materializes it and
    :mod:`posenc.attention` derives FlexAttention's ``score_mod`` from the same method.
    """

    num_heads: int

    def bias_at(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """The bias of ``head`` between a query at ``q_pos`` and a key at ``k_pos``.

        Written with broadcastable tensor ops only (no Python branching on values, no
        checks), so that it evaluates both on whole broadcast grids (``head (H, 1, 1)``,
        ``q_pos (..., 1, q, 1)``, ``k_pos (..., 1, 1, k)``) and on the scalars FlexAttention
        passes to a ``score_mod``. Returns the bias in ``dtype``.
        """
        raise NotImplementedError

    def prepare_bias(self, device: torch.device, dtype: torch.dtype) -> None:
        """Build whatever :meth:`bias_at` reads on ``device`` in ``dtype`` (a memoised table).

        Attention calls it once per call before :meth:`bias_at` may be traced (FlexAttention,
        checkpointing under ``torch.compile``), so that ``bias_at`` itself mutates nothing.
        """

    def bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype | None = None) -> Tensor:
        """Materialized bias ``(num_heads, q_len, k_len)`` or ``(batch, num_heads, q, k)``.

        Validates the positions (shape, dtype, finiteness, whole numbers where the method
        needs them) and evaluates :meth:`bias_at` on the whole grid. ``dtype`` defaults to
        float32 (float64 when either position tensor is float64).
        """
        self.check_bias_positions(q_pos, k_pos)
        if dtype is None:
            wide = torch.float64 in (q_pos.dtype, k_pos.dtype)
            dtype = torch.float64 if wide else torch.float32
        return materialize_bias(self, q_pos, k_pos.to(q_pos.device), dtype)

    def check_bias_positions(self, q_pos: Tensor, k_pos: Tensor) -> None:
        """Validate positions for :meth:`bias` (overridden where whole numbers are needed):
        ``q_pos`` on the device of the encoding's parameters (if any), ``k_pos`` on
        ``q_pos``'s, batches equal or 1."""
        check_positions(q_pos, "q_pos", device=state_device(self))
        check_positions(k_pos, "k_pos", device=q_pos.device)
        if q_pos.dim() == 2 and k_pos.dim() == 2:
            qb, kb = q_pos.shape[0], k_pos.shape[0]
            if qb != kb and 1 not in (qb, kb):
                raise ValueError(
                    f"q_pos and k_pos must have the same batch size (or 1); got {qb} and {kb}"
                )

    def forward(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        return self.bias(q_pos, k_pos)


def materialize_bias(
    encoding: BiasEncoding, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype
) -> Tensor:
    """``encoding.bias_at`` on the whole ``(heads, q, k)`` grid, without checks (by the
    encoding's ``bias_grid`` where it has one).

    Shape:
        q_pos ``(q,)`` or ``(batch, q)``, k_pos ``(k,)`` or ``(batch, k)`` →
        ``(heads, q, k)`` when both are 1-D, else ``(batch, heads, q, k)``.
    """
    encoding.prepare_bias(q_pos.device, dtype)
    grid = getattr(encoding, "bias_grid", None)
    if callable(grid):
        return grid(q_pos, k_pos, dtype)
    heads = torch.arange(encoding.num_heads, device=q_pos.device).view(-1, 1, 1)
    q_grid = q_pos[..., None, :, None]  # (..., 1, q, 1)
    k_grid = k_pos[..., None, None, :]  # (..., 1, 1, k)
    return encoding.bias_at(heads, q_grid, k_grid, dtype)


class ContextualEncoding(PositionalEncoding):
    """A logit term that reads q or k as well as positions (Shaw, Transformer-XL).

    ``logit_term(q, k, q_pos, k_pos, scale)`` returns ``(batch, heads, q_len, k_len)``, added
    to ``scale · q @ kᵀ``; the encoding applies ``scale`` itself where its formula does.
    ``value_term(probs, q_pos, k_pos)`` returns ``(batch, heads, q_len, head_dim)`` added to
    the attention output when ``has_value_term`` is True. Both may be called on a block of
    queries and any contiguous range of keys; positions are those of the block and range.
    """

    #: True when :meth:`value_term` contributes; attention then needs the probabilities.
    has_value_term: bool = False

    def logit_term(
        self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, scale: float
    ) -> Tensor:
        raise NotImplementedError

    def value_term(self, probs: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None

    def forward(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The validated :meth:`logit_term` at the encoding's logit scale (its
        ``logit_scale(head_dim)``, else ``head_dim ** -0.5``): ``(batch, heads, q, k)``.

        Raises:
            ValueError: naming ``q``/``k`` (not floating ``(batch, heads, seq, head_dim)``
                of this ``head_dim``) or ``q_pos``/``k_pos`` (shape, dtype, device, batch,
                the encoding's own checks).
        """
        head_dim: int = getattr(self, "head_dim")  # noqa: B009 (every contextual term has it)
        owner = type(self).__name__
        check_rotary_input(q, q_pos, head_dim, "q", "q_pos", owner, self.num_axes)
        device = state_device(self)
        if device is not None and q.device != device:
            raise ValueError(f"q must be on {device} (the {owner}'s parameters); got {q.device}")
        check_rotary_input(k, k_pos, head_dim, "k", "k_pos", owner, self.num_axes)
        if k.shape[0] != q.shape[0]:
            raise ValueError(f"k must have the batch of q ({q.shape[0]}); got {k.shape[0]}")
        validate = getattr(self, "validate_positions", None)
        if callable(validate):
            validate(q_pos, "q_pos")
            validate(k_pos, "k_pos")
        scale_of = getattr(self, "logit_scale", None)
        scale = float(scale_of(head_dim)) if callable(scale_of) else head_dim**-0.5
        return self.logit_term(q, k, q_pos, k_pos, scale)


def state_device(module: nn.Module) -> torch.device | None:
    """The device of ``module``'s first parameter or buffer; None when it holds none (then
    inputs may live anywhere)."""
    for parameter in module.parameters():
        return parameter.device
    for buffer in module.buffers():
        return buffer.device
    return None


def empty_linear(
    in_features: int,
    out_features: int,
    *,
    bias: bool = True,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Linear:
    """An ``nn.Linear`` whose parameters are allocated, not drawn: its owner's
    ``reset_parameters`` draws them, so that the constructor draws exactly what
    ``reset_parameters`` draws (a ``meta``-device build then ``reset_parameters`` gives the
    module a normal build gives, seed for seed)."""
    where = torch.get_default_device() if device is None else device
    return skip_init(nn.Linear, in_features, out_features, bias=bias, device=where, dtype=dtype)
