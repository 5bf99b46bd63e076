"""The published findings the ``extend`` and ``passkey`` rows test, as data.

PI's (Chen et al. 2023) and YaRN's (Peng et al. 2023) findings on extending a RoPE model:
without fine-tuning, NTK-aware, dynamic NTK and YaRN scaling beat PI at 2×T; a short
fine-tune at 2×T recovers PI's perplexity; and passkey retrieval, which the base must manage
at T, plain RoPE loses at 4×T and PI regains after the fine-tune. Each
:class:`~posenc.lab.claims.Claim` names its paper and the published number it rests on, the
statistic of the rows and the threshold, with its reason in the text; thresholds were set
from the papers, not from our results. ``longctx`` writes rows of the same kinds and carries
these claims beside its own.

Controls (:class:`~posenc.lab.claims.Control`): "X beats PI" and the fine-tune's gains are
comparative, decided against PI (or PI before its fine-tune) directly; the recovery after the
fine-tune is decided against PI without it (only the fine-tune may recover); "RoPE loses the
passkey at 4×T" is decided against RoPE at T (a model that never retrieves says nothing of
length), the base's retrieval at T against the same model at 4×T (a key found at any length is
a task solved without positions), PI's retrieval after the fine-tune against plain RoPE at the
same length. Every claim requires that the RoPE base learned its data
(:class:`~posenc.lab.claims.Learned`).
"""

from __future__ import annotations

from posenc.lab.claims import Claim, Control, Learned, OneOf, Statistic, ratio_at, value_at

__all__ = ["BASE_LEARNED", "CLAIMS", "ZERO_SHOT", "passkey_accuracy_at"]

_PI = "Chen et al. 2023, Positional Interpolation (PI), https://arxiv.org/abs/2306.15595"
_YARN = "Peng et al. 2023, YaRN, https://arxiv.org/abs/2309.00071"

#: The zero-shot stage of ``extend`` rows: ``"no_ft"`` in the first results, ``"zero"`` later.
ZERO_SHOT = OneOf(("no_ft", "zero"))

#: Every claim's requirement: the RoPE base (zero-shot rows at T) learned its data.
BASE_LEARNED = Learned(
    "extend", {"method": "rope", "stage": ZERO_SHOT, "multiplier": 1.0}, "rope base"
)


def _beats_pi(method: str, published: str) -> Claim:
    return Claim(
        name=f"{method}_beats_pi_zero_shot",
        text=f"Without fine-tuning, {method} has lower perplexity than PI at 2×T: "
        f"ppl(pi) / ppl({method}) at 2×T ≥ 1, paired by seed (decided against pi directly).",
        paper=_YARN,
        published=published,
        experiment="extend",
        statistic=ratio_at(
            "extend",
            {"stage": ZERO_SHOT, "multiplier": 2.0},
            "ppl",
            {"method": "pi"},
            {"method": method},
        ),
        threshold=1.0,
        direction=">=",
        control=Control("pi"),
        requires=(BASE_LEARNED,),
    )


def passkey_accuracy_at(method: str, stage: object, multiplier: float) -> Statistic:
    """Passkey accuracy of ``method`` at ``stage`` and ``multiplier``·T, averaged over depths
    within each seed."""
    where = {"method": method, "stage": stage, "multiplier": multiplier}
    return value_at("passkey", where, "accuracy", mean_over=("depth",))


_PI_AT_4T = "PI Table 3 (LLaMA-7B, T = 2k, PG-19): PI without fine-tuning 16.10 at 4×T (7.20 at T)"

#: Every claim the ``extend`` and ``passkey`` rows of ``extend`` test, in report order.
CLAIMS: tuple[Claim, ...] = (
    _beats_pi(
        "ntk",
        f"No table: {_PI_AT_4T}; NTK-aware without fine-tuning well below PI only in figures "
        "(bloc97's post, YaRN §3.1)",
    ),
    _beats_pi(
        "dynamic_ntk",
        f"No table: {_PI_AT_4T}; YaRN Figure 5 (Llama-2 7B, no fine-tuning): dynamic scaling "
        "well below plain RoPE beyond T (figure only)",
    ),
    _beats_pi(
        "yarn",
        f"No table: {_PI_AT_4T}; YaRN Figure 5 (Llama-2 7B, no fine-tuning): Dynamic-YaRN "
        "below Dynamic-PI beyond T (figure only)",
    ),
    Claim(
        name="pi_fine_tune_improves",
        text="A short fine-tune at 2×T cuts PI's ppl at 2×T by at least a third: "
        "ppl(zero-shot) / ppl(fine-tuned) ≥ 1.5, paired by seed (decided against PI before "
        "the fine-tune directly).",
        paper=_PI,
        published="Table 3 (LLaMA-7B, 2k -> 8k, PG-19): 16.10 without fine-tuning, 7.12 "
        "after 200 steps (ratio 2.26), 6.95 after 1000",
        experiment="extend",
        statistic=ratio_at(
            "extend",
            {"method": "pi", "multiplier": 2.0},
            "ppl",
            {"stage": ZERO_SHOT},
            {"stage": "ft"},
        ),
        threshold=1.5,
        direction=">=",
        control=Control("pi without fine-tuning"),
        requires=(BASE_LEARNED,),
    ),
    Claim(
        name="pi_fine_tune_recovers",
        text="After the short fine-tune, PI's ppl at 2×T is within 10 % of the base model's "
        "ppl at T: ppl(pi, ft, 2T) / ppl(rope, zero-shot, T) ≤ 1.10, paired by seed; decided "
        "against PI without the fine-tune (it holds only if zero-shot PI's ratio is above "
        "1.10: the fine-tune, not interpolation alone, recovers).",
        paper=_PI,
        published="Table 3: 7.12 at 8k after 200 steps; Table 1: the base LLaMA-7B 7.20 at "
        "2k (ratio 0.99)",
        experiment="extend",
        statistic=ratio_at(
            "extend",
            {},
            "ppl",
            {"method": "pi", "stage": "ft", "multiplier": 2.0},
            {"method": "rope", "stage": ZERO_SHOT, "multiplier": 1.0},
        ),
        threshold=1.10,
        direction="<=",
        control=Control(
            "pi without fine-tuning",
            ratio_at(
                "extend",
                {},
                "ppl",
                {"method": "pi", "stage": ZERO_SHOT, "multiplier": 2.0},
                {"method": "rope", "stage": ZERO_SHOT, "multiplier": 1.0},
            ),
        ),
        requires=(BASE_LEARNED,),
    ),
    Claim(
        name="base_passkey_at_t",
        text="The RoPE base, trained with passkey rows mixed in, retrieves the key at T: "
        "accuracy of plain RoPE at 1×T averaged over depths ≥ 0.9 (the precondition of "
        "every passkey comparison beyond T); decided against the same model at 4×T: it holds "
        "only if RoPE at 4×T retrieves less than 0.9 (a key found at every length is a task "
        "solved without positions).",
        paper=_PI,
        published="Table 4 (LLaMA-7B, T = 2k): every model, PI or not, retrieves within its "
        "pre-training length (k_max ≥ 1792 of 2048 for the direct fine-tune)",
        experiment="passkey",
        statistic=passkey_accuracy_at("rope", ZERO_SHOT, 1.0),
        threshold=0.9,
        direction=">=",
        control=Control("rope at 4×T", passkey_accuracy_at("rope", ZERO_SHOT, 4.0)),
        requires=(BASE_LEARNED,),
    ),
    Claim(
        name="rope_passkey_fails_at_4x",
        text="Plain RoPE without extension does not retrieve the key at 4×T: accuracy averaged "
        "over depths ≤ 0.1 (half the paper's success criterion of 20 % of trials); decided "
        "against RoPE at T: it holds only if the same model retrieves more than 0.1 at T (a "
        "model that never retrieves says nothing about length).",
        paper=_PI,
        published="Table 4 (LLaMA-7B, T = 2k): even fine-tuned at 8k without interpolation, "
        "k_max stays at 1792–2560 (≈ T) after 200–10,000 steps; PI reaches 8192",
        experiment="passkey",
        statistic=passkey_accuracy_at("rope", ZERO_SHOT, 4.0),
        threshold=0.1,
        direction="<=",
        control=Control("rope at T", passkey_accuracy_at("rope", ZERO_SHOT, 1.0)),
        requires=(BASE_LEARNED,),
    ),
    Claim(
        name="pi_fine_tune_passkey_2x",
        text="After the fine-tune, PI retrieves the passkey at 2×T: accuracy averaged over "
        "depths ≥ 0.2 (the paper's success criterion, 20 % of trials); decided against plain "
        "RoPE at 2×T (it holds only if RoPE without interpolation retrieves less than 0.2).",
        paper=_PI,
        published="Table 4 (LLaMA-7B, T = 2k): after 200 steps PI-8k's k_max, the longest "
        "passkey distance retrieved in ≥ 20 % of 10 trials, is 8192 = 4×T",
        experiment="passkey",
        statistic=passkey_accuracy_at("pi", "ft", 2.0),
        threshold=0.2,
        direction=">=",
        control=Control("rope", passkey_accuracy_at("rope", ZERO_SHOT, 2.0)),
        requires=(BASE_LEARNED,),
    ),
)
