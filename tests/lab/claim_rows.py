"""Helpers for hand-made claim rows (tests/lab/test_claims.py and the experiments' tests).

The hand-made cases of each claim give one or two seeds: enough to check which rows a claim
reads, how it pairs seeds and on which side of its threshold the mean falls, but too few for
the mean to clear its noise (:mod:`posenc.lab.claims`: with two seeds the noise is 6.31 seed
standard errors). :func:`replicate_seeds` repeats every seed's rows under new seed numbers: the
mean is unchanged, the spread over seeds shrinks by about √copies, so the same rows decide.
:func:`own_test` strips a claim's control and requirements: the hand-made cases check its own
statistic and threshold; tests/lab/test_claim_controls.py checks the gates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from posenc.lab.claims import Claim

__all__ = ["own_test", "replicate_seeds"]


def own_test(claim: Claim) -> Claim:
    """``claim`` without its control and requirements: only its own statistic and threshold."""
    return dataclasses.replace(claim, control=None, requires=())


def replicate_seeds(rows: Sequence[Mapping[str, Any]], copies: int = 8) -> list[dict[str, Any]]:
    """``rows`` and ``copies - 1`` copies of them, copy ``j`` of a row of seed ``s`` (rows
    without a seed are seed 0) moved to seed ``s + 1000 j``: each seed's values observed in
    ``copies`` seeds."""
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    return [
        {**row, "seed": (row.get("seed") or 0) + 1000 * j} if j else dict(row)
        for j in range(copies)
        for row in rows
    ]
