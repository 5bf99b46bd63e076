"""Randomized positions (Ruoss et al. 2023) as a wrapper around any one-axis encoding.

Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers"
(ACL 2023, https://arxiv.org/abs/2305.16843): in training, a sequence of ``n`` tokens gets
the positions of a uniformly random subset of ``[0, L)`` of size ``n``, kept in increasing
order, instead of ``0 … n − 1``; with ``L`` at least the longest test length, every position
the model meets at test time was seen in training, and only the order of tokens carries
information.

:class:`RandomizedPositions` generalizes this from ``arange(n)`` to any whole-number positions
``p ≥ 0`` (packed documents, padded rows): each batch row ``b`` draws one sorted random
subset ``S_b`` of ``[0, L)`` whose size is the span of the row's real positions,
``max(p) − min(p) + 1``, and a real token's position ``p`` becomes ``S_b[p − min(p)]``, a
strictly increasing map, so order, equality and the restart of packed documents are kept. On
``0 … n − 1`` it is exactly Ruoss's scheme.

Padding does not reach the real tokens: only the real tokens (attention passes its
``key_padding_mask`` as ``real``) size and index a row's subset, and each row's draw takes
the same ``L`` random numbers from the generator whatever the sequence length. So with the
same generator state a right- or left-padded row's real tokens get exactly the positions the
row gets unpadded (left padding numbered ``arange(seq)`` included: the map depends only on
positions relative to the row's first real one), and a row's draw depends on no other row.
Padding tokens keep the positions they were given (attention masks them as keys).

At evaluation (``module.eval()``) two choices, the argument ``evaluation``:

* ``"randomized"`` (default): draw as in training. Ruoss's code evaluates this way; the
  positions are in distribution whatever the test length ``≤ L``. Results vary with the draw
  (set :attr:`RandomizedPositions.generator` for a reproducible one).
* ``"ordered"``: positions unchanged. Deterministic and able to continue a KV cache; the model
  saw each position in training but never consecutive ones at this density, so results differ
  from the randomized evaluation (the lab measures how much).

A KV cache can only be continued in ordered evaluation: a random map drawn per call would
give cached and new tokens positions from different subsets (``ValueError`` naming
``cache``). Multi-axis encodings (grids, M-RoPE) are refused: the method is defined on one
axis.

The wrapper takes the wrapped encoding's hooks (its ``position_embedding``, ``rotate_qk``,
``bias_at`` …) by delegation and adds ``transform_positions``, which attention applies to the
positions before anything reads them (:func:`posenc.attention.build_context`).
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor

from posenc._validate import check_in_choices, check_positive_int, validating_values
from posenc.encoding.base import EncodingWrapper, PositionalEncoding
from posenc.encoding.protocols import PositionTransform
from posenc.encoding.resolve import hooks_of
from posenc.positions import check_padding_mask

__all__ = ["RandomizedEvaluation", "RandomizedPositions", "randomize_positions"]

RandomizedEvaluation = Literal["randomized", "ordered"]
_EVALUATIONS: tuple[RandomizedEvaluation, ...] = ("randomized", "ordered")


class RandomizedPositions(EncodingWrapper, PositionTransform):
    """Any one-axis encoding with randomized positions (Ruoss et al. 2023; see the module).

    Args:
        encoding: the encoding to wrap (sinusoidal, learned, RoPE, ALiBi, T5, …); its tables
            must cover ``max_length`` positions (a learned table needs ``max_length`` rows).
        max_length: ``L``, the range positions are drawn from; at least the longest sequence
            the model will see (Ruoss: the longest test length, or more).
        evaluation: ``"randomized"`` (default, as Ruoss's code) or ``"ordered"``.

    Attributes:
        generator: optional ``torch.Generator`` for the draws (None: torch's global one).

    Padding: in a padded batch (``real``, attention's ``key_padding_mask``) each row's subset
    is drawn for its real tokens only, so their positions are those the row gets unpadded
    with the same generator state (right or left padding, any width); padding tokens keep
    their positions. Ordered evaluation returns positions unchanged, padded or not.

    Example::

        >>> from posenc.rotary import RotaryEmbedding
        >>> rope = RandomizedPositions(RotaryEmbedding(16), max_length=64)
        >>> rope.transform_positions(torch.arange(5), batch=2).shape
        torch.Size([2, 5])
    """

    def __init__(
        self,
        encoding: PositionalEncoding,
        max_length: int,
        *,
        evaluation: RandomizedEvaluation = "randomized",
    ) -> None:
        super().__init__()
        if isinstance(encoding, RandomizedPositions):
            raise ValueError("encoding is already a RandomizedPositions")
        hooks = hooks_of(encoding)  # raises for a module that is no encoding
        if not (hooks.additive or hooks.rotary or hooks.logit_terms):
            raise ValueError(
                f"encoding {type(encoding).__name__} reads no positions (NoPE): there is "
                "nothing to randomize"
            )
        if hooks.num_axes != 1:
            raise ValueError(
                f"encoding reads {hooks.num_axes} position axes; randomized positions are "
                "defined on one axis"
            )
        self.encoding = encoding
        self.max_length = check_positive_int("max_length", max_length)
        check_in_choices("evaluation", evaluation, _EVALUATIONS)
        self.evaluation: RandomizedEvaluation = evaluation
        self.generator: torch.Generator | None = None

    @property
    def randomizing(self) -> bool:
        """True when :meth:`transform_positions` draws (training, or randomized evaluation)."""
        return self.training or self.evaluation == "randomized"

    def transform_positions(
        self,
        positions: Tensor,
        *,
        batch: int,
        continuing: bool = False,
        real: Tensor | None = None,
    ) -> Tensor:
        """Map a real token's whole position ``p ≥ 0`` to ``S_b[p − m_b]``, ``S_b`` a sorted
        random subset of ``[0, L)`` per batch row sized by the span of the row's real
        positions from ``m_b``, their minimum (see the module), or return positions unchanged
        in ordered evaluation.

        Args:
            positions: ``(seq,)`` or ``(batch, seq)``, whole numbers in ``[0, max_length)``.
            batch: rows of the forward (1-D positions get one draw per row).
            continuing: True when the call continues a KV cache.
            real: ``(batch, seq)`` bool or 0/1, True for real tokens (attention passes its
                ``key_padding_mask``); only they size and take the draw, padding keeps its
                positions. None: every token is real.

        Returns:
            int64 ``(batch, seq)`` when drawing, else ``positions``.

        Raises:
            ValueError: naming ``positions`` (fractional, negative, or beyond
                ``max_length − 1``), ``real`` (not bool or 0/1, or not ``(batch, seq)``) or
                ``cache`` (a random draw continuing a cache).
        """
        if not self.randomizing:  # ordered: as given, within the range trained on
            if validating_values() and positions.numel() > 0:
                high = positions.max().item()  # one host sync
                if high > self.max_length - 1:
                    raise ValueError(
                        f"positions reach {high:g}, beyond max_length - 1 = "
                        f"{self.max_length - 1}: the model was trained on positions below "
                        "max_length (ordered evaluation keeps positions as given); raise "
                        "max_length or evaluate shorter sequences"
                    )
            return positions
        if continuing:
            raise ValueError(
                "cache: randomized positions cannot continue a KV cache (each call draws a new "
                "subset); decode with evaluation='ordered' and model.eval()"
            )
        rows = positions.expand(batch, -1) if positions.dim() == 1 else positions
        return randomize_positions(rows, self.max_length, real=real, generator=self.generator)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped encoding's forward (positions as given: randomize them first with
        :meth:`transform_positions`, as attention does)."""
        return self.encoding(*args, **kwargs)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}, evaluation={self.evaluation!r}"


def randomize_positions(
    positions: Tensor,
    max_length: int,
    *,
    real: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Randomized positions of padded or packed rows: each row's real tokens mapped through
    the row's own sorted random subset of ``[0, max_length)`` (Ruoss et al. 2023).

    .. math:: p \\mapsto S_b[p - m_b], \\quad S_b \\subset [0, L) \\text{ sorted},\\;
        |S_b| = \\max_{real} p - m_b + 1, \\; m_b = \\min_{real} p

    Each row draws ``max_length`` uniforms and takes the first ``|S_b|`` entries of their
    argsort, as :func:`posenc.positions.randomized_positions` does (bit for bit on ``arange``
    rows), so a row's positions depend only on the generator state and its real tokens'
    positions relative to the first: padding (either side, any width) and the other rows
    change nothing. The function behind :class:`RandomizedPositions`; the lab can call it on
    its batches.

    Args:
        positions: ``(batch, seq)`` whole numbers in ``[0, max_length)``.
        max_length: ``L`` ≥ 1, the range drawn from.
        real: ``(batch, seq)`` bool or 0/1, True for real tokens; padding keeps its positions.
            None: every token is real.
        generator: for the draws (None: torch's global one); they run on its device.

    Returns:
        int64 ``(batch, seq)``.

    Raises:
        ValueError: naming ``positions`` (not ``(batch, seq)``, fractional, negative, or
            beyond ``max_length − 1``), ``max_length`` or ``real`` (not bool or 0/1, or not
            ``(batch, seq)``).

    Example::

        >>> real = torch.tensor([[True, True, True, False, False]])
        >>> g = torch.Generator().manual_seed(0)
        >>> padded = randomize_positions(torch.arange(5)[None], 64, real=real, generator=g)
        >>> g = torch.Generator().manual_seed(0)
        >>> alone = randomize_positions(torch.arange(3)[None], 64, generator=g)
        >>> torch.equal(padded[:, :3], alone)
        True
    """
    max_length = check_positive_int("max_length", max_length)
    if not isinstance(positions, Tensor) or positions.dim() != 2 or positions.is_complex():
        got = tuple(positions.shape) if isinstance(positions, Tensor) else type(positions).__name__
        raise ValueError(f"positions must be a (batch, seq) tensor to be randomized, got {got}")
    if positions.is_floating_point() and bool((positions != positions.round()).any()):
        raise ValueError("positions must be whole numbers to be randomized")
    rows = positions.to(torch.long)
    if real is None:
        keep = torch.ones_like(rows, dtype=torch.bool)
    else:
        keep = check_padding_mask(real, "real", tuple(rows.shape)).to(rows.device)
    if rows.numel() == 0:
        return rows
    if bool((rows < 0).any()):
        raise ValueError("positions must be >= 0 to be randomized")
    needed = int(rows.max()) + 1
    if needed > max_length:
        raise ValueError(
            f"positions reach {needed - 1}, beyond max_length - 1 = {max_length - 1}: "
            f"raise max_length to at least {needed}"
        )
    batch = rows.shape[0]
    draw_device = generator.device if generator is not None else rows.device
    noise = torch.rand(batch, max_length, generator=generator, device=draw_device)
    order = noise.argsort(dim=-1).to(rows.device)  # (batch, max_length)
    has_real = keep.any(dim=-1, keepdim=True)  # (batch, 1)
    low = torch.where(keep, rows, max_length).amin(dim=-1, keepdim=True)
    high = torch.where(keep, rows, -1).amax(dim=-1, keepdim=True)
    span = torch.where(has_real, high - low + 1, 0)  # (batch, 1): the subset's size per row
    width = int(span.max())
    if width == 0:  # no real token anywhere: nothing to draw for
        return rows
    # A row's first `span` entries of the permutation, sorted; the rest sort last.
    first = order[:, :width]
    first = torch.where(torch.arange(width, device=rows.device) < span, first, max_length)
    subsets = first.sort(dim=-1).values  # (batch, width)
    index = torch.where(keep, rows - low, 0).clamp(0, width - 1)
    return torch.where(keep, subsets.gather(-1, index), rows)
