"""Structures an encoding may declare so that attention can serve it by a faster plan.

A kind is a base class with required methods; an encoding derives from it to say it has that
structure, and the plans of :mod:`posenc.attention.plans` are chosen by these kinds (each
plan names the kind it serves). None of them changes what attention computes: a plan is exact
to the reference path (``sdpa``), tested on every encoding of its kind.

===========================  ================================================  ============
kind                         structure                                         encodings
===========================  ================================================  ============
:class:`LinearBias`          ``bias_at(h, q, k) = m_h (k - q)``                ALiBi
:class:`AdditiveScores`      ``transform_scores(s) = s + scores_term(s)``      CoPE, DAPE
:class:`ClippedRelative`     key/value tables of clipped distances             Shaw
:class:`SinusoidRelative`    ``u``, ``v`` and projected distance sinusoids     XL
:class:`DisentangledRelative`  c2p / p2c tables of bucketed distances          DeBERTa
===========================  ================================================  ============

A bias that is a function of ``q - k`` alone says so by
:attr:`~posenc.encoding.protocols.BiasEncoding.depends_on_distance_only` (or
:meth:`~posenc.encoding.protocols.BiasEncoding.distance_only_up_to`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posenc.encoding._common import required
from posenc.encoding.protocols import BiasEncoding, ContextualEncoding, ScoresReader

__all__ = [
    "AdditiveScores",
    "ClippedRelative",
    "DisentangledRelative",
    "LinearBias",
    "SinusoidRelative",
]


class LinearBias(BiasEncoding):
    """A bias linear in the distance, ``m_h · (k_pos - q_pos)`` (causal ALiBi): attention
    splits it into a key vector and an exact per-row shift."""

    def linear_bias_slopes(self) -> Tensor | None:
        """The slopes ``m_h`` ``(heads,)`` when the bias is linear in this configuration,
        else None (symmetric ALiBi)."""
        raise required(self, "linear_bias_slopes")


class AdditiveScores(ScoresReader):
    """A scores reader that adds a term to the scores (CoPE, DAPE): a flash kernel that
    computes ``scale · q kᵀ`` itself takes the term as its mask."""

    def scores_term(
        self,
        scores: Tensor,
        *,
        q: Tensor,
        k: Tensor,
        q_pos: Tensor,
        k_pos: Tensor,
        allowed: Tensor | None,
    ) -> Tensor:
        """What :meth:`~posenc.encoding.protocols.ScoresReader.transform_scores` adds to
        ``scores`` (same arguments)."""
        raise required(self, "scores_term")


class ClippedRelative(ContextualEncoding):
    """Relative key (and value) tables of distances clipped to ``±reach`` (Shaw et al.)."""

    def clipped_relative_tables(self) -> tuple[Tensor, Tensor | None, int]:
        """``(key_table, value_table or None, reach)``; tables ``(2 · reach + 1, head_dim)``
        indexed by ``clip(k - q, -reach, reach) + reach``."""
        raise required(self, "clipped_relative_tables")


class SinusoidRelative(ContextualEncoding):
    """Transformer-XL's terms: global biases ``u``, ``v`` and projected sinusoids of the
    distance."""

    def distance_terms(self) -> tuple[Tensor, Tensor]:
        """The global content and position biases ``(u, v)``, each ``(heads, head_dim)``."""
        raise required(self, "distance_terms")

    def projected(self, distances: Tensor) -> Tensor:
        """The projected sinusoids of ``distances`` ``(n,)``: ``(heads, n, head_dim)``."""
        raise required(self, "projected")


class DisentangledRelative(ContextualEncoding):
    """DeBERTa's disentangled attention: content-to-position and position-to-content tables
    of bucketed distances."""

    def position_tables(self, dtype: torch.dtype) -> tuple[Tensor | None, Tensor | None]:
        """The projected position keys and queries (None for a term the method leaves out)."""
        raise required(self, "position_tables")

    def distance_rows(self, relative: Tensor) -> Tensor:
        """The table rows of relative distances ``relative`` (bucketed and clipped)."""
        raise required(self, "distance_rows")
