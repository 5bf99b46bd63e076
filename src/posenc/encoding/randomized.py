"""Randomized positions (Ruoss et al. 2023) as a wrapper around any one-axis encoding.

Ruoss et al., "Randomized Positional Encodings Boost Length Generalization of Transformers"
(ACL 2023, https://arxiv.org/abs/2305.16843): in training, a sequence of ``n`` tokens gets
the positions of a uniformly random subset of ``[0, L)`` of size ``n``, kept in increasing
order, instead of ``0 … n − 1``; with ``L`` at least the longest test length, every position
the model meets at test time was seen in training, and only the order of tokens carries
information.

:class:`RandomizedPositions` generalizes this from ``arange(n)`` to any whole-number positions
``p ≥ 0`` (packed documents, padded rows): each batch row draws one sorted random subset
``S`` of ``[0, L)`` of size ``max(p) + 1`` and position ``p`` becomes ``S[p]``, a strictly
increasing map, so order, equality and the restart of packed documents are kept. On
``0 … n − 1`` it is exactly Ruoss's scheme.

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
from posenc.positions import randomized_positions

__all__ = ["RandomizedEvaluation", "RandomizedPositions"]

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
        """Map whole positions ``p ≥ 0`` to ``S_b[p]``, ``S_b`` a sorted random subset of
        ``[0, L)`` per batch row (see the module), or return them unchanged in ordered
        evaluation.

        Args:
            positions: ``(seq,)`` or ``(batch, seq)``, whole numbers in ``[0, max_length)``.
            batch: rows of the forward (1-D positions get one draw per row).
            continuing: True when the call continues a KV cache.
            real: the protocol's real-token mask; not read (each row's map is drawn for its
                positions, padded ones included).

        Returns:
            int64 ``(batch, seq)`` when drawing, else ``positions``.

        Raises:
            ValueError: naming ``positions`` (fractional, negative, or a row needing more than
                ``max_length`` positions; in ordered evaluation, a position beyond
                ``max_length − 1``) or ``cache`` (a random draw continuing a cache).
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
        if positions.is_floating_point() and bool((positions != positions.round()).any()):
            raise ValueError("positions must be whole numbers to be randomized")
        whole = positions.to(torch.long)
        if whole.numel() == 0:
            return whole.expand(batch, -1) if whole.dim() == 1 else whole
        if bool((whole < 0).any()):
            raise ValueError("positions must be >= 0 to be randomized")
        needed = int(whole.max()) + 1
        if needed > self.max_length:
            raise ValueError(
                f"positions reach {needed - 1}, beyond max_length - 1 = {self.max_length - 1}: "
                f"raise max_length to at least {needed}"
            )
        rows = whole.expand(batch, -1) if whole.dim() == 1 else whole
        subsets = randomized_positions(
            needed,
            self.max_length,
            batch=rows.shape[0],
            generator=self.generator,
            device=rows.device,
        )
        return subsets.gather(-1, rows)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped encoding's forward (positions as given: randomize them first with
        :meth:`transform_positions`, as attention does)."""
        return self.encoding(*args, **kwargs)

    def extra_repr(self) -> str:
        return f"max_length={self.max_length}, evaluation={self.evaluation!r}"
