"""The seed claims of the newest methods in the train-short/test-long sweep, as data.

Part of :data:`posenc.lab.seed_claims.SEED_CLAIMS` (kept in their own file, as a family) and
judged on the rows of ``posenc lab extrapolate`` (issue 27, point 4): FoX's and
stick-breaking's length extrapolation, HoPE's and PoPE's against RoPE, CAPE's against the
sinusoidal encoding it augments, and RoPE inside linear attention (a run with
``--backend linear``, whose rows carry ``backend = "linear"``). Each states the paper's
finding in its own words and the number behind it where one was retrieved; where only the
abstract or a figure was, it says so. Thresholds are the findings' directions (a ratio of 1,
a difference of 0, ALiBi's 10 % for "flat"), set before any run; the verdicts are judged over
seeds by :mod:`posenc.lab.claims`. Learned sinks and soft-capping make no claim about length
(their sources, gpt-oss and Gemma 2, publish none testable here): they are measured only.
"""

from __future__ import annotations

import json

from posenc.lab.claims import Cell, Claim, Difference, MeanOverSeeds, Ratio, Statistic, ratio_at

__all__ = ["CAPE_TEXT_RECIPE", "METHOD_CLAIMS"]

_FOX = (
    "Lin et al. 2025, Forgetting Transformer: Softmax Attention with a Forget Gate (FoX, "
    "ICLR), https://arxiv.org/abs/2503.02130"
)
_FOX_PUBLISHED = (
    "Abstract: 'FoX outperforms the Transformer on long-context language modeling, length "
    "extrapolation, and short-context downstream tasks'; the ICLR submission's abstract: it "
    "'does not require any position embeddings and generalizes beyond the training context "
    "length'. The length-extrapolation figure's numbers were not retrieved (only the first "
    "page of the arXiv HTML is stored here)"
)
_STICK = (
    "Tan et al. 2024, Scaling Stick-Breaking Attention: An Efficient Implementation and "
    "In-depth Study, https://arxiv.org/abs/2410.17980"
)
_STICK_PUBLISHED = (
    "Abstract: as a drop-in replacement for softmax+RoPE it is competitive on length "
    "generalisation, 'allowing a model trained with 2^11 context window to perform well at "
    "2^14 with perplexity improvements' (8×T); the table's numbers were not retrieved"
)
_HOPE = (
    "Chen et al. 2025, HoPE: A Novel Positional Encoding Without Long-Term Decay for Enhanced "
    "Context Awareness and Extrapolation (ACL), https://arxiv.org/abs/2410.21216"
)
_HOPE_PUBLISHED = (
    "Abstract: HoPE 'exhibits greater robustness to the out-of-distribution behavior in "
    "attention patterns during extrapolation' than RoPE, validated up to 3B parameters; the "
    "perplexity tables were not retrieved"
)
_POPE = (
    "Gopalakrishnan et al. 2025, Decoupling the 'What' and 'Where' With Polar Coordinate "
    "Positional Embeddings (PoPE), https://arxiv.org/abs/2509.10534"
)
_CAPE = (
    "Likhomanenko et al. 2021, CAPE: Encoding Relative Positions with Continuous Augmented "
    "Positional Embeddings (NeurIPS), https://arxiv.org/abs/2106.03143"
)
_ROFORMER = (
    "Su et al. 2021, RoFormer: Enhanced Transformer with Rotary Position Embedding, §3.4.3 "
    "(eq. 19) and its 'Performer with RoPE' experiment, https://arxiv.org/abs/2104.09864"
)

#: CAPE's augmentation for text in its reference port (github.com/gcambara/cape README,
#: "CAPE for text", after the paper's MT experiments): what the sweep runs CAPE with (the
#: registry's default, no augmentation, is the sinusoidal encoding itself)
CAPE_TEXT_RECIPE = {"max_global_shift": 5.0, "max_local_shift": 0.5, "max_global_scaling": 1.03}


def _growth(encoding: str, multiplier: float, **where: object) -> Ratio:
    """ppl of ``encoding`` at ``multiplier``·T over its ppl at T (rows selected by ``where``
    too)."""
    at = {"encoding": encoding, "multiplier": multiplier, **where}
    return Ratio(
        Cell("extrapolate", at, "ppl"), Cell("extrapolate", at | {"multiplier": 1.0}, "ppl")
    )


def _flat(encoding: str, label: str, threshold: float, paper: str, published: str) -> Claim:
    """``encoding``'s ppl(8T) / ppl(T) at most ``threshold``, averaged over seeds."""
    return Claim(
        name=f"{encoding}_flat_8x",
        text=f"{label} extrapolates to 8×T: ppl(8T) / ppl(T) ≤ {threshold:.2f}.",
        paper=paper,
        published=published,
        experiment="extrapolate",
        statistic=MeanOverSeeds(_growth(encoding, 8.0)),
        threshold=threshold,
        direction="<=",
    )


def _degrades_less(
    encoding: str, label: str, than: str, than_label: str, multiplier: float, paper: str,
    published: str,
) -> Claim:  # fmt: skip
    """``than``'s growth to ``multiplier``·T minus ``encoding``'s, paired by seed, ≥ 0."""
    at = f"{multiplier:g}×T"
    return Claim(
        name=f"{encoding}_degrades_less_than_{than}_{multiplier:g}x",
        text=f"{label} degrades less than {than_label} at {at}: {than}'s ppl({at}) / ppl(T) "
        f"minus {encoding}'s, paired by seed, ≥ 0.",
        paper=paper,
        published=published,
        experiment="extrapolate",
        statistic=MeanOverSeeds(
            Difference(_growth(than, multiplier), _growth(encoding, multiplier))
        ),
        threshold=0.0,
        direction=">=",
    )


def _lower_than(
    better: str, label: str, worse: str, worse_label: str, multiplier: float, paper: str,
    published: str,
) -> Claim:  # fmt: skip
    """ppl(``worse``) / ppl(``better``) at ``multiplier``·T, paired by seed, ≥ 1."""
    at = f"{multiplier:g}×T"
    return Claim(
        name=f"{better}_lower_than_{worse}_{multiplier:g}x",
        text=f"Past T, {label} has lower perplexity than {worse_label}: ppl({worse}) / "
        f"ppl({better}) at {at}, paired by seed, ≥ 1.",
        paper=paper,
        published=published,
        experiment="extrapolate",
        statistic=ratio_at(
            "extrapolate",
            {"multiplier": multiplier},
            "ppl",
            {"encoding": worse},
            {"encoding": better},
        ),
        threshold=1.0,
        direction=">=",
    )


def _rope_in_linear_attention() -> Statistic:
    """ppl(nope) / ppl(rope) at T, both with linear attention, paired by seed."""
    return ratio_at(
        "extrapolate",
        {"backend": "linear", "multiplier": 1.0},
        "ppl",
        {"encoding": "nope"},
        {"encoding": "rope"},
    )


METHOD_CLAIMS: tuple[Claim, ...] = (
    _flat("fox", "FoX (no position encoding, a forget gate)", 1.10, _FOX, _FOX_PUBLISHED),
    _degrades_less("fox", "FoX", "rope", "RoPE", 8.0, _FOX, _FOX_PUBLISHED),
    # "perform well at 2^14 with perplexity improvements": no worse at 8×T than at T
    _flat("stick_breaking", "Stick-breaking attention", 1.0, _STICK, _STICK_PUBLISHED),
    _degrades_less(
        "stick_breaking",
        "Stick-breaking attention",
        "rope",
        "softmax + RoPE",
        8.0,
        _STICK,
        _STICK_PUBLISHED,
    ),
    # "past T" is every length beyond it: the nearest one checked (2×T) and the farthest
    *(_lower_than("hope", "HoPE", "rope", "RoPE", m, _HOPE, _HOPE_PUBLISHED) for m in (2.0, 8.0)),
    _degrades_less(
        "pope",
        "PoPE",
        "rope",
        "RoPE",
        8.0,
        _POPE,
        "Abstract (124M-774M, language modeling): 'PoPE shows strong zero-shot length "
        "extrapolation capabilities, whereas RoPE's performance degrades significantly on "
        "longer sequences at test time' (v3: even compared to YaRN); the figure's numbers "
        "were not retrieved",
    ),
    Claim(
        name="cape_degrades_less_than_sinusoidal_2x",
        text="CAPE (the reference port's text recipe: global shift 5, local shift 0.5, "
        "scaling 1.03) generalizes to unseen lengths better than the sinusoidal encoding it "
        "augments: sinusoidal's ppl(2T) / ppl(T) minus CAPE's, paired by seed, ≥ 0.",
        paper=_CAPE,
        published="Abstract: absolute embeddings 'suffer from generalization issues when "
        "evaluating on sequences longer than seen at training time'; CAPE keeps relative "
        "embeddings' 'better generalization' and 'leads to better generalization performance "
        "as well as increased stability with respect to training hyper-parameters' (MT, "
        "images, speech); the tables' numbers were not retrieved",
        experiment="extrapolate",
        statistic=MeanOverSeeds(
            Difference(
                _growth("sinusoidal", 2.0),
                _growth("cape", 2.0, pos_kwargs=json.dumps(CAPE_TEXT_RECIPE, sort_keys=True)),
            )
        ),
        threshold=0.0,
        direction=">=",
    ),
    Claim(
        name="rope_helps_linear_attention",
        text="RoPE with linear attention (rotary on the feature-mapped q and k, elu + 1 "
        "features) beats linear attention without a position encoding: ppl(nope) / "
        "ppl(rope) at T, both with the linear backend, paired by seed, ≥ 1.",
        paper=_ROFORMER,
        published="'Performer with RoPE' (§4, Enwik8, a 12-layer Performer): with RoPE "
        "the language-modeling loss converges faster and ends lower than without; a loss "
        "curve in a figure, no table (and FAVOR+ random features, not elu + 1)",
        experiment="extrapolate",
        statistic=_rope_in_linear_attention(),
        threshold=1.0,
        direction=">=",
    ),
)
