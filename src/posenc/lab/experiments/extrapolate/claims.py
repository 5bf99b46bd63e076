"""The published findings the ``extrapolate`` rows test, as data.

ALiBi's train-short/test-long findings for sinusoidal, learned, rotary and ALiBi encodings;
KERPLE's and FIRE's flat perplexity to 2×T; DAPE around ALiBi and around KERPLE; and the
newest methods of the sweep: FoX's and stick-breaking's length extrapolation, HoPE's and
PoPE's against RoPE, CAPE's against the sinusoidal encoding it augments, and RoPE inside
linear attention (a run with ``--backend linear``, whose rows carry ``backend = "linear"``).

Each :class:`~posenc.lab.claims.Claim` names its paper and the published number it rests on
(table and value; where only the abstract or a figure was retrieved, it says so), the
statistic of the result rows that tests it and the threshold, with the threshold's reason in
its text. Thresholds were set from the papers, not from our results; a claim that fails at
our scale is reported as failing. :mod:`posenc.lab.claims` judges them. Learned sinks and
soft-capping make no claim about length (their sources, gpt-oss and Gemma 2, publish none
testable here): they are measured only.

Every claim names the control it is decided against (:class:`~posenc.lab.claims.Control`):
a claim about one encoding's curve ("ALiBi is flat past T") holds only if the control fails the
same test in the same run, NoPE for flatness (an encoding is flat *because of* its bias only if
a model with no position encoding is not flat too), ALiBi for the sinusoidal encoding's rise
(the paper's contrast: ALiBi still improves where sinusoidal degrades), RoPE for
stick-breaking (the paper's softmax + RoPE baseline); a comparative claim ("X degrades less
than RoPE") is decided against the encoding it compares with. Every claim also requires that
the models it reads learned their data (:class:`~posenc.lab.claims.Learned`: loss at T at most
0.9 of the context-free unigram loss), else it is undecided.
"""

from __future__ import annotations

import json

from posenc.lab.claims import (
    Above,
    Cell,
    Claim,
    Control,
    Difference,
    Learned,
    MeanOverSeeds,
    OneOf,
    Ratio,
    Statistic,
    fraction_undefined,
    ratio_at,
)

__all__ = ["CAPE_TEXT_RECIPE", "CLAIMS", "METHOD_CLAIMS"]

_ALIBI = "Press et al. 2022, Train Short, Test Long (ALiBi), https://arxiv.org/abs/2108.12409"
_KERPLE = "Chi et al. 2022, KERPLE, https://arxiv.org/abs/2205.09921"
_FIRE = "Li et al. 2023, Functional Interpolation for Relative Positions (FIRE), https://arxiv.org/abs/2310.04418"
_DAPE = (
    "Zheng et al. 2024, DAPE: Data-Adaptive Positional Encoding, https://arxiv.org/abs/2405.14722"
)

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


def learned(*encodings: str, **where: object) -> tuple[Learned, ...]:
    """The requirement that each of ``encodings`` (rows also matching ``where``) learned its
    data: its loss at T well below the context-free loss."""
    return tuple(
        Learned("extrapolate", {"encoding": e, "multiplier": 1.0, **where}, e) for e in encodings
    )


def growth(encoding: str, multiplier: float, **where: object) -> Ratio:
    """ppl of ``encoding`` at ``multiplier``·T over its ppl at T (rows selected by ``where``
    too)."""
    at = {"encoding": encoding, "multiplier": multiplier, **where}
    return Ratio(
        Cell("extrapolate", at, "ppl"), Cell("extrapolate", at | {"multiplier": 1.0}, "ppl")
    )


def _flat_2x(encoding: str, label: str, paper: str, dape: str) -> Claim:
    """``encoding`` extrapolates to 2×T, against DAPE Table 5's re-run (the method papers'
    own tables were not retrievable)."""
    return Claim(
        name=f"{encoding}_flat_2x",
        text=f"{label} extrapolates to 2×T: ppl(2T) / ppl(T) ≤ 1.10; decided against NoPE "
        "(it holds only if NoPE's own ppl(2T) / ppl(T) is above 1.10).",
        paper=paper,
        published=f"{label.split()[0]}'s own tables not retrieved; DAPE Table 5 (125M, arXiv, "
        f"T = 512, 3 seeds): {dape}",
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth(encoding, 2.0)),
        threshold=1.10,
        direction="<=",
        control=Control("nope", MeanOverSeeds(growth("nope", 2.0))),
        requires=learned(encoding, "nope"),
    )


def _dape_lowers(inner: str, label: str, published: str) -> Claim:
    """DAPE around ``inner`` has lower perplexity than ``inner`` alone at 8×T."""
    kwargs = json.dumps({"inner": inner}, sort_keys=True)  # as extrapolate writes it
    # the registry's default inner is ALiBi: rows built without arguments are DAPE-ALiBi too
    variants = (kwargs, "{}") if inner == "alibi" else (kwargs,)
    return Claim(
        name=f"dape_lowers_{inner}_8x",
        text=f"DAPE around {label} has lower perplexity than {label} alone at 8×T: "
        f"ppl({inner}) / ppl(dape, pos_kwargs {kwargs}) at 8×T ≥ 1, paired by seed "
        f"(decided against {inner} directly).",
        paper=_DAPE,
        published=published,
        experiment="extrapolate",
        statistic=ratio_at(
            "extrapolate",
            {"multiplier": 8.0},
            "ppl",
            {"encoding": inner},
            {"encoding": "dape", "pos_kwargs": OneOf(variants)},
        ),
        threshold=1.0,
        direction=">=",
        control=Control(inner),
        requires=(
            *learned(inner),
            Learned(
                "extrapolate",
                {"encoding": "dape", "pos_kwargs": OneOf(variants), "multiplier": 1.0},
                "dape",
            ),
        ),
    )


def _flat(
    encoding: str, label: str, threshold: float, paper: str, published: str, control: str
) -> Claim:
    """``encoding``'s ppl(8T) / ppl(T) at most ``threshold``, averaged over seeds, and
    ``control``'s above it."""
    return Claim(
        name=f"{encoding}_flat_8x",
        text=f"{label} extrapolates to 8×T: ppl(8T) / ppl(T) ≤ {threshold:.2f}; decided "
        f"against {control} (it holds only if {control}'s own ratio is above the bound).",
        paper=paper,
        published=published,
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth(encoding, 8.0)),
        threshold=threshold,
        direction="<=",
        control=Control(control, MeanOverSeeds(growth(control, 8.0))),
        requires=learned(encoding, control),
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
        f"minus {encoding}'s, paired by seed, ≥ 0 (decided against {than} directly).",
        paper=paper,
        published=published,
        experiment="extrapolate",
        statistic=MeanOverSeeds(Difference(growth(than, multiplier), growth(encoding, multiplier))),
        threshold=0.0,
        direction=">=",
        control=Control(than),
        requires=learned(encoding, than),
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
        f"ppl({better}) at {at}, paired by seed, ≥ 1 (decided against {worse} directly).",
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
        control=Control(worse),
        requires=learned(better, worse),
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


#: The newest methods' claims (the sweep's last encodings).
METHOD_CLAIMS: tuple[Claim, ...] = (
    # FoX is NoPE plus a forget gate: NoPE is the control that isolates the gate
    _flat("fox", "FoX (no position encoding, a forget gate)", 1.10, _FOX, _FOX_PUBLISHED, "nope"),
    _degrades_less("fox", "FoX", "rope", "RoPE", 8.0, _FOX, _FOX_PUBLISHED),
    # "perform well at 2^14 with perplexity improvements": no worse at 8×T than at T
    # the paper's baseline is softmax + RoPE
    _flat("stick_breaking", "Stick-breaking attention", 1.0, _STICK, _STICK_PUBLISHED, "rope"),
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
        "augments: sinusoidal's ppl(2T) / ppl(T) minus CAPE's, paired by seed, ≥ 0 (decided "
        "against sinusoidal directly).",
        paper=_CAPE,
        published="Abstract: absolute embeddings 'suffer from generalization issues when "
        "evaluating on sequences longer than seen at training time'; CAPE keeps relative "
        "embeddings' 'better generalization' and 'leads to better generalization performance "
        "as well as increased stability with respect to training hyper-parameters' (MT, "
        "images, speech); the tables' numbers were not retrieved",
        experiment="extrapolate",
        statistic=MeanOverSeeds(
            Difference(
                growth("sinusoidal", 2.0),
                growth("cape", 2.0, pos_kwargs=json.dumps(CAPE_TEXT_RECIPE, sort_keys=True)),
            )
        ),
        threshold=0.0,
        direction=">=",
        control=Control("sinusoidal"),
        requires=(
            *learned("sinusoidal"),
            *learned("cape", pos_kwargs=json.dumps(CAPE_TEXT_RECIPE, sort_keys=True)),
        ),
    ),
    Claim(
        name="rope_helps_linear_attention",
        text="RoPE with linear attention (rotary on the feature-mapped q and k, elu + 1 "
        "features) beats linear attention without a position encoding: ppl(nope) / "
        "ppl(rope) at T, both with the linear backend, paired by seed, ≥ 1 (decided against "
        "nope directly).",
        paper=_ROFORMER,
        published="'Performer with RoPE' (§4, Enwik8, a 12-layer Performer): with RoPE "
        "the language-modeling loss converges faster and ends lower than without; a loss "
        "curve in a figure, no table (and FAVOR+ random features, not elu + 1)",
        experiment="extrapolate",
        statistic=_rope_in_linear_attention(),
        threshold=1.0,
        direction=">=",
        control=Control("nope"),
        requires=learned("rope", "nope", backend="linear"),
    ),
)

#: Every claim the ``extrapolate`` rows test, in the order they are reported.
CLAIMS: tuple[Claim, ...] = (
    Claim(
        name="alibi_flat_4x",
        text="ALiBi is flat past T: its ppl at 4×T is within 10 % of its ppl at T "
        "(ppl(4T) / ppl(T) ≤ 1.10); decided against NoPE: it holds only if NoPE's own "
        "ppl(4T) / ppl(T) is above 1.10 (a flat NoPE would make flatness say nothing of ALiBi).",
        paper=_ALIBI,
        published="Table 3 (T = 1024): 18.66 at T, 17.95 at 4024 ≈ 3.9×T (ratio 0.96); "
        "Table 2 (T = 512): 19.73 at T, 18.41 at 2512 ≈ 4.9×T (0.93)",
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth("alibi", 4.0)),
        threshold=1.10,
        direction="<=",
        control=Control("nope", MeanOverSeeds(growth("nope", 4.0))),
        requires=learned("alibi", "nope"),
    ),
    Claim(
        name="sinusoidal_degrades_1_25x",
        text="Sinusoidal degrades from the first extra tokens: ppl(1.25T) / ppl(T) ≥ 1.02 "
        "(at least 2 % worse; the published rise at 1.2×T is 2.7 %, where ALiBi and rotary "
        "still improve); decided against ALiBi, the paper's contrast: it holds only if ALiBi's "
        "own ratio is below 1.02.",
        paper=_ALIBI,
        published="Table 2 (T = 512): 20.05 at T, 20.59 at 612 = 1.2×T (ratio 1.027); it "
        "improves only up to 20-50 extra tokens (§4)",
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth("sinusoidal", 1.25)),
        threshold=1.02,
        direction=">=",
        control=Control("alibi", MeanOverSeeds(growth("alibi", 1.25))),
        requires=learned("sinusoidal", "alibi"),
    ),
    Claim(
        name="sinusoidal_explodes_2x",
        text="Sinusoidal at 2×T is at least 1.5× its ppl at T (ppl(2T) / ppl(T) ≥ 1.5); "
        "decided against ALiBi, the paper's contrast: it holds only if ALiBi's own ratio is "
        "below 1.5.",
        paper=_ALIBI,
        published="Table 2 (T = 512): 20.05 -> 43.54 at 1012 ≈ 2×T (2.17); Table 3 "
        "(T = 1024): 19.34 -> 51.09 at 2024 ≈ 2×T (2.64)",
        experiment="extrapolate",
        statistic=MeanOverSeeds(growth("sinusoidal", 2.0)),
        threshold=1.5,
        direction=">=",
        control=Control("alibi", MeanOverSeeds(growth("alibi", 2.0))),
        requires=learned("sinusoidal", "alibi"),
    ),
    Claim(
        name="learned_undefined_past_t",
        text="A learned table is undefined past T: every learned row with multiplier > 1 has "
        "an undefined ppl (fraction undefined ≥ 1.0). A fact by construction (the table has "
        "T rows), shown apart and not counted among the claims.",
        paper=_ALIBI,
        published="Learned absolute positions cannot be evaluated past L (§2, footnote 4)",
        experiment="extrapolate",
        statistic=fraction_undefined(
            "extrapolate", {"encoding": "learned", "multiplier": Above(1.0)}, "ppl"
        ),
        threshold=1.0,
        direction=">=",
        kind="fact",
    ),
    # "RoPE lies between ALiBi and sinusoidal" is two orderings; one claim each, so that a
    # failure says which side broke (a single min() of both would hide it).
    Claim(
        name="rope_degrades_more_than_alibi_4x",
        text="RoPE degrades more than ALiBi at 4×T: rope's ppl(4T) / ppl(T) minus ALiBi's, "
        "paired by seed, ≥ 0 (decided against alibi directly).",
        paper=_ALIBI,
        published="Table 3 (T = 1024) at 4024 ≈ 3.9×T: rotary 19.33 -> 44.30 (×2.29), "
        "ALiBi 18.66 -> 17.95 (×0.96)",
        experiment="extrapolate",
        statistic=MeanOverSeeds(Difference(growth("rope", 4.0), growth("alibi", 4.0))),
        threshold=0.0,
        direction=">=",
        control=Control("alibi"),
        requires=learned("rope", "alibi"),
    ),
    Claim(
        name="rope_degrades_less_than_sinusoidal_4x",
        text="RoPE degrades less than sinusoidal at 4×T: sinusoidal's ppl(4T) / ppl(T) minus "
        "rope's, paired by seed, ≥ 0 (decided against sinusoidal directly).",
        paper=_ALIBI,
        published="Table 3 (T = 1024) at 4024 ≈ 3.9×T: sinusoidal 19.34 -> 144.00 (×7.45), "
        "rotary 19.33 -> 44.30 (×2.29)",
        experiment="extrapolate",
        statistic=MeanOverSeeds(Difference(growth("sinusoidal", 4.0), growth("rope", 4.0))),
        threshold=0.0,
        direction=">=",
        control=Control("sinusoidal"),
        requires=learned("rope", "sinusoidal"),
    ),
    _flat_2x(
        "kerple",
        "KERPLE (log kernel)",
        _KERPLE,
        "KERPLE 4.58 at T, 4.35 at 2×T (×0.95), 5.44 at 4×T (×1.19)",
    ),
    _flat_2x("fire", "FIRE", _FIRE, "FIRE 4.57 at T, 4.70 at 2×T (×1.03), 30.12 at 4×T (×6.6)"),
    _dape_lowers(
        "alibi",
        "ALiBi",
        "§4.2 (Arxiv, T = 512, ppl at 16×T): 125M DAPE-Alibi 3.82 vs Alibi 4.54, 350M 3.57 vs "
        "4.21; Appendix Figure 6 (T = 128, D_DAPE = 4): 5.67 vs 5.85 at 64×T",
    ),
    _dape_lowers(
        "kerple",
        "KERPLE",
        "§4.1-4.2 (Arxiv, ppl at 8192): T = 128, 125M DAPE-Kerple 5.00 vs Kerple 31.93; "
        "T = 512, 350M 3.43 vs 22.76",
    ),
    *METHOD_CLAIMS,
)
