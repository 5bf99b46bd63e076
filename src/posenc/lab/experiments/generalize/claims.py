"""The published findings the ``tasks`` rows test: Ruoss et al.'s randomized positions and
CoPE's against RoPE out of distribution, as data (:mod:`posenc.lab.claims` judges them).

Both are comparative, decided against the baseline the papers name directly
(:class:`~posenc.lab.claims.Control`): the same encoding with plain positions (Ruoss et al.),
RoPE (CoPE's Tables 2-3)."""

from __future__ import annotations

from posenc.lab.claims import Claim, Control, difference_at

__all__ = ["CLAIMS"]

_RUOSS = "Ruoss et al. 2023, Randomized Positional Encodings, https://arxiv.org/abs/2305.16843"


def _randomized_helps(encoding: str, published: str) -> Claim:
    return Claim(
        name=f"randomized_{encoding}_raises_ood_accuracy",
        text=f"Randomized positions raise {encoding}'s out-of-distribution token accuracy on "
        "reverse: mean over test lengths of token_acc, randomized minus plain, paired by seed, "
        "≥ 0.05 (5 points, under half the published average gain of 12). Per-token accuracy, "
        "as the paper measures it.",
        paper=_RUOSS,
        published=published,
        experiment="tasks",
        statistic=difference_at(
            "tasks",
            {"task": "reverse", "encoding": encoding, "split": "test"},
            "token_acc",
            {"randomized": True},
            {"randomized": False},
            mean_over=("length",),
        ),
        threshold=0.05,
        direction=">=",
        control=Control(f"{encoding} with plain positions"),
    )


_COPE = (
    "Golovneva et al. 2024, Contextual Position Encoding (CoPE), https://arxiv.org/abs/2405.18719"
)


def _cope_beats_rope(task: str, what: str, published: str) -> Claim:
    return Claim(
        name=f"cope_beats_rope_{task}_ood",
        text=f"On {what}, CoPE's out-of-distribution token accuracy exceeds RoPE's: mean over "
        "test lengths of token_acc, cope minus rope (plain positions), paired by seed, ≥ 0.05 "
        "(5 points, a third of the published gap or less).",
        paper=_COPE,
        published=published,
        experiment="tasks",
        statistic=difference_at(
            "tasks",
            {"task": task, "randomized": False, "split": "test"},
            "token_acc",
            {"encoding": "cope"},
            {"encoding": "rope"},
            mean_over=("length",),
        ),
        threshold=0.05,
        direction=">=",
        control=Control("rope"),
    )


#: The claims of Ruoss et al. and CoPE its rows test, in report order.
CLAIMS: tuple[Claim, ...] = (
    _randomized_helps(
        "sinusoidal",
        "Abstract: +12.0 % test accuracy on average over 15 tasks (Table 1 not retrieved); "
        "DAPE Table 2 (Ruoss's setup): randomized sin/cos 67.28 % per-token accuracy on "
        "reverse string, chance 50 %",
    ),
    _randomized_helps(
        "rope",
        "Abstract: +12.0 % test accuracy on average over 15 tasks (Table 1 not retrieved); "
        "DAPE Table 2 (Ruoss's setup): randomized RoPE 65.23 % per-token accuracy on reverse "
        "string, chance 50 %",
    ),
    _cope_beats_rope(
        "flip_flop",
        "flip-flop (longer sequences than trained on)",
        "Table 2: flip-flop OOD test error RoPE 20.3 %, CoPE 4.9 % (a 15.4-point gap; "
        "in distribution 1.8 % and 0.0 %)",
    ),
    _cope_beats_rope(
        "counting",
        "counting (one variable here; more ops than trained on)",
        "Table 3: counting test error, relative PE vs CoPE: 1.1 % vs 0.0 % (1 variable), "
        "17.8 % vs 1.2 % (3 variables, a 16.6-point gap), 22.4 % vs 7.4 % (5 variables)",
    ),
)
