"""What a run's numbers say, in words: the findings that lead the report, the data and model
described, and the cross-signal atlas in brief.

:func:`findings` turns result rows (``results.csv``) and training curves (``metrics.jsonl``)
into plain sentences with their margins over seeds, each kind of rows read by its
experiment's reader (:func:`extrapolation_findings`, :func:`extension_findings`): which
encoding predicts best at the training length ``T`` and at the longest length evaluated, how
much each encoding's loss rises from ``T`` to there, what the zero-shot context-extension
methods gain over plain RoPE, and whether training had converged (the relative fall of the
training loss over the last quarter of the steps, :func:`last_quarter_fall`).
:func:`data_and_model` describes the corpus, the model and its training from a run's
``config.json`` and rows. :data:`ATLAS` is docs/results.md §9's answer to "which encoding for
which signal" in brief (tests/lab/test_findings.py checks each entry's numbers against
docs/results.md).

Losses are in nats per byte (the byte-level models' cross-entropy); a margin is the mean ±
sample std over seeds of a difference taken seed by seed (paired), and is called *within the
seeds' noise* when its mean is below the one-sided 95 % bound of
:func:`posenc.lab.claims.noise_quantile` times its standard error.

Example::

    >>> rows = [
    ...     {"experiment": "extrapolate", "encoding": e, "seed": s, "train_len": 64,
    ...      "eval_len": 64 * m, "loss": base + rise * (m - 1) + 0.01 * s}
    ...     for e, base, rise in (("rope", 1.9, 0.3), ("alibi", 2.0, 0.0))
    ...     for s in (0, 1, 2) for m in (1, 8)
    ... ]
    >>> said = findings(rows, readers={"extrapolate": extrapolation_findings})
    >>> print(said[0])  # doctest: +ELLIPSIS
    At the training length (T = 64 bytes), RoPE predicts best: ...

One module per concept: :mod:`~posenc.lab.findings.sentences` holds the findings and their
readers, :mod:`~posenc.lab.findings.description` the data and model described,
:mod:`~posenc.lab.findings.atlas` the atlas in brief.
"""

from __future__ import annotations

from posenc.lab.findings.atlas import ATLAS, ATLAS_SECTION, AtlasEntry
from posenc.lab.findings.description import data_and_model
from posenc.lab.findings.sentences import (
    CONVERGED_FALL,
    Reader,
    extension_findings,
    extrapolation_findings,
    findings,
    last_quarter_fall,
)

__all__ = [
    "ATLAS",
    "ATLAS_SECTION",
    "CONVERGED_FALL",
    "AtlasEntry",
    "Reader",
    "data_and_model",
    "extension_findings",
    "extrapolation_findings",
    "findings",
    "last_quarter_fall",
]
