"""Seed claims: published findings stated as checks on lab result rows, judged with their noise.

A :class:`Claim` is a paper's finding in words, the published number it rests on, and a
statistic of the result rows (a :class:`Measurement`: mean ± std across seeds, and the
standard error it is judged against) with a threshold. :func:`judge` gives its
:class:`Verdict`. The **margin** is how far the mean clears the bound, signed so that positive
is the claim's side: ``mean − bound`` for direction ``">="``, ``bound − mean`` for ``"<="``,
where ``bound = threshold ± k·std`` with ``k = margin_in_std`` (0 by default: the threshold
itself; a claim with ``k > 0`` asks for an effect of ``k`` seed stds and needs two seeds). The
**noise** is a one-sided 95 % confidence half-width of the mean, ``q · se``:

- with ``n ≥ 2`` seeds, ``se = std / √n`` over seeds and ``q`` the 95 % quantile of Student's
  t with ``n − 1`` degrees of freedom (6.31 for 2 seeds, 2.92 for 3, 2.13 for 5, 1.83 for 10):
  with few seeds the std is itself a guess, and t widens the bound for that (a normal
  ``q = 1.645`` would let a two-seed claim on its bound hold by chance 17 % of the time, not 5);
- with one seed, the spread over evaluation windows when the rows carry it: a cell's
  standard error is the column ``<value>_se`` of its row (``ppl_se`` beside ``ppl``: the
  standard error of the mean over the test windows), carried through means over rows
  (``√Σse² / k``), differences (``√(se₁² + se₂²)``) and ratios (delta method), treating the
  cells as independent. Cells scored on the same windows are positively correlated, so this
  overstates the noise of a difference or ratio: it errs toward undecided. ``q = 1.645``
  (normal: a cell's windows are many). This says the trained model would give the same
  verdict on more test text, not that another seed would: it is weaker evidence than seeds.
  A fraction of rows defined (:class:`FractionDefined`) is exact within a seed (se 0).

Then the verdict:

- **holds** when ``margin ≥ noise``: the claim's side even at the far end of the interval;
- **fails** when ``margin < −noise``;
- **undecided** when ``−noise ≤ margin < noise``: the data cannot tell, or when there is no
  noise to judge against (one seed and no ``<value>_se`` column: "one seed, no spread");
- **undefined** when the rows cannot decide at all: the statistic returns ``None`` (rows
  missing, a cell undefined in some seed, such as a learned table past ``T`` or a NaN loss),
  or ``k > 0`` with one seed.

With zero noise (identical seeds, exact fractions) the mean alone decides, a mean on the bound
holding. Each wrong decision (holds when the true mean sits on the bound, or fails) has at
most 5 % probability under the usual normal model; the verdict's ``margin``, ``noise`` and
``n`` are reported beside it.

A verdict about an encoding must be one that could have gone the other way, so two gates come
after the rule above (each verdict carries its ``reason`` in words):

- **the control**: a claim names the baseline its paper compares with, or NoPE
  (:class:`Control`). A claim whose statistic is about one encoding alone ("ALiBi is flat past
  T") gives the control's statistic too; the claim **holds** only if the control, run in the
  same experiment, **fails** the same test (threshold, direction and noise). A control that
  holds too ("NoPE is just as flat") or sits within its noise makes the claim undecided; a
  control not run makes it undecided, the reason naming the control to run. A comparative
  claim ("X degrades less than RoPE", a statistic that already pairs X with its baseline)
  names its control without a statistic: it is decided against it directly.
- **the requirements** (:class:`Learned`: "the model learned its data", its eval loss at the
  training length at most :data:`LEARNED_LOSS_FRACTION` of the context-free unigram loss): a
  requirement that fails, or that the rows cannot tell, makes a verdict that would hold or
  fail undecided, with the reason.

A definitional **fact** (``kind="fact"``: a learned table is undefined past ``T``) is judged
the same way but is not a finding about the data: :func:`count_verdicts` and
:func:`format_verdicts` leave facts out of "N of M hold" and the report shows them in their
own table (:func:`is_fact`).

The numbers judged, per seed and over seeds, come from :mod:`posenc.lab.quantities`
(re-exported here).

Example::

    claims = get_experiment("extrapolate").claims
    verdicts = judge_all(claims, read_results_csv("runs/extrapolate/results.csv"))
    print("\\n".join(v.summary for v in verdicts))

Each experiment carries the claims its rows test (``Experiment.claims``, defined in its own
module); :func:`posenc.lab.experiments.all_claims` lists every registered experiment's.

One module per concept: :mod:`~posenc.lab.claims.claim` holds the claim and its control,
:mod:`~posenc.lab.claims.judge` the rule above (:func:`judge`, :func:`noise_quantile`,
:func:`applicable`), :mod:`~posenc.lab.claims.verdicts` the verdicts and their records and
terminal lines (:func:`verdict_record`, :func:`format_verdicts`).
"""

from __future__ import annotations

from posenc.lab.claims.claim import LAYERS_COLUMN, Claim, Control
from posenc.lab.claims.judge import applicable, judge, judge_all, noise_quantile
from posenc.lab.claims.verdicts import (
    Verdict,
    count_verdicts,
    format_verdicts,
    is_fact,
    verdict_record,
)
from posenc.lab.quantities import (
    Above,
    Cell,
    Difference,
    FractionDefined,
    MeanOverSeeds,
    Measurement,
    OneOf,
    Quantity,
    Ratio,
    Sample,
    Statistic,
    aggregate,
    cell_se,
    defined_value,
    difference_at,
    format_mean_std,
    fraction_defined,
    fraction_undefined,
    ratio_at,
    value_at,
)
from posenc.lab.requirements import LEARNED_LOSS_FRACTION, Check, Learned, Reaches, Requirement

__all__ = [
    "LAYERS_COLUMN",
    "LEARNED_LOSS_FRACTION",
    "Above",
    "Cell",
    "Check",
    "Claim",
    "Control",
    "Difference",
    "FractionDefined",
    "Learned",
    "MeanOverSeeds",
    "Measurement",
    "OneOf",
    "Quantity",
    "Ratio",
    "Reaches",
    "Requirement",
    "Sample",
    "Statistic",
    "Verdict",
    "aggregate",
    "applicable",
    "cell_se",
    "count_verdicts",
    "defined_value",
    "difference_at",
    "format_mean_std",
    "format_verdicts",
    "fraction_defined",
    "fraction_undefined",
    "is_fact",
    "judge",
    "judge_all",
    "noise_quantile",
    "ratio_at",
    "value_at",
    "verdict_record",
]
