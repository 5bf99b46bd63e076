"""``posenc report RUN_DIR``: the self-contained HTML page a person reads about a run.

The page, top to bottom:

0. what the numbers say, before any table: the findings in plain sentences with their margins
   over seeds, and whether training converged (:func:`posenc.lab.findings.findings`); the
   data and model of each run described in words (:func:`posenc.lab.findings.data_and_model`,
   the corpus as ``data.json`` records it); and, for a page of text-extrapolation rows, the
   cross-signal atlas in brief (:data:`posenc.lab.findings.ATLAS`) with a link to
   docs/results.md §9;
1. the claims (``claims.json``, judged by :mod:`posenc.lab.runner`): verdict, the measured
   mean ± std over seeds, the threshold and the paper's published number;
2. the tables: per kind of rows (their ``experiment`` column), the tables of the
   :class:`Section` one of the experiments the caller passes declares for them (pivots of
   :func:`posenc.lab.tables.pivot`: encoding × length, mean ± std over seeds);
3. the figures: the sections' result figures, the training curves of every
   ``runs/**/metrics.jsonl`` (:func:`posenc.lab.figures.training_curves`), and the
   property-check figures that ``posenc demo`` writes to ``RUN_DIR/checks/``;
4. the configuration (``config.json``) and the environment the page was written in;
5. the raw rows of ``results.csv``, collapsed.

A page may gather several runs (:mod:`posenc.lab.gather`): by default ``RUN_DIR`` itself and
each sub-folder holding a ``results.csv`` (``posenc demo``'s ``OUT`` and ``OUT/extension``),
or the run folders given as ``runs``. Their rows are pooled into the tables and figures,
their claims listed together, and a table of the runs says which folder holds each claim's
numbers; each run's configuration is shown under its folder's name.

Images are embedded as base64 PNG so the file stands alone; the result figures are also
written to ``RUN_DIR/figures/``. Tables wrap to the page width; only the raw rows scroll.

The page knows an experiment only as :class:`ShowsRows` (its sections by kind of rows): the
caller that knows the experiments passes them (the runner its own experiment, ``posenc report``
and the demo every experiment of the registry, :mod:`posenc.lab.experiments`), so this module
sits below the runner and the registry rather than reading them.

The page and its sections are :mod:`~posenc.lab.report.page`, the claims table
:mod:`~posenc.lab.report.claims`, the HTML pieces (cells, tables, figures, style)
:mod:`~posenc.lab.report.markup`.
"""

from __future__ import annotations

from posenc.lab.report.page import Section, ShowsRows, write_report

__all__ = ["Section", "ShowsRows", "write_report"]
