"""Properties of posenc.lab.data.ruler beyond the shared task tests (tests/lab/data/test_tasks.py
checks every task's answers with an independent solver): exact lengths, distractors that never
collide with the answer, the Zipf counts, and errors naming the parameter."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest

from posenc.lab.data.ruler import ESSAY, NEEDLE_TASKS, fwe_counts, zeta
from posenc.lab.data.tasks import make_task

RULER = ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"]


@pytest.mark.parametrize("name", RULER)
def test_prompt_length_is_exactly_the_length(name: str) -> None:
    task = make_task(name)
    for length in range(task.train_lengths[0], task.train_lengths[1] + 1, 7):
        for ex in task.examples(4, length, seed=length):
            assert len(ex.prompt) == length


@pytest.mark.parametrize("haystack", ["noise", "essay", "needle"])
def test_needle_distractors_never_share_a_queried_key_or_an_answer_value(haystack: str) -> None:
    task = make_task("niah_multiquery", haystack=haystack, needle_queries=2, key_vocab=8)
    for ex in task.examples(50, 96, seed=0):
        question = len(ex.prompt) - 1 - ex.prompt[::-1].index("Q")
        asked = set(ex.prompt[question + 1 :])
        needles = [
            (ex.prompt[i + 1], ex.prompt[i + 2 : i + 6])
            for i in range(question)
            if ex.prompt[i] == "N"
        ]
        real = [n for n in needles if n[0] in asked]
        assert len(real) == 2  # one needle per queried key, however many distractors
        values = [v for _, v in needles]
        assert all(values.count(v) == 1 for _, v in real)


def test_essay_haystack_is_the_fixed_text_and_noise_the_repeated_sentence() -> None:
    assert len(ESSAY) == 1009
    ex = make_task("niah_single", haystack="essay").examples(1, 200, seed=3)[0]
    start = ex.prompt.index("N")
    filler = ex.prompt[:start] + ex.prompt[start + 6 : -2]
    assert filler == tuple(ESSAY[i % len(ESSAY)] for i in range(len(filler)))
    ex = make_task("niah_single").examples(1, 40, seed=3)[0]
    start = ex.prompt.index("N")
    filler = ex.prompt[:start] + ex.prompt[start + 6 : -2]
    assert filler == tuple("xyz"[i % 3] for i in range(len(filler)))


def test_presets_follow_ruler_configs() -> None:
    keys = {
        name: tuple(spec.defaults[k] for k in ("needle_keys", "needle_values", "needle_queries"))
        for name, spec in NEEDLE_TASKS.items()
    }
    assert keys == {
        "niah_single": (1, 1, 1),
        "niah_multikey": (4, 1, 1),
        "niah_multivalue": (1, 4, 1),
        "niah_multiquery": (4, 1, 4),
    }


def test_vt_answer_is_every_variable_bound_to_the_value() -> None:
    ex = make_task("vt", chains=1, hops=4).examples(1, 60, seed=0)[0]
    assert len(ex.answer) == 5 and len(set(ex.answer)) == 5
    first = ex.prompt.index(ex.answer[0])
    assert ex.prompt[first + 1 : first + 6] == ("=", *ex.prompt[-4:])


def test_zeta_and_fwe_counts() -> None:
    assert zeta(2.0) == pytest.approx(math.pi**2 / 6, rel=1e-10)
    assert zeta(4.0) == pytest.approx(math.pi**4 / 90, rel=1e-10)
    counts = fwe_counts(500, 2.0, 64)
    assert sum(counts) == 500
    assert counts[1:] == [math.floor(500 * k**-2.0 / zeta(2.0)) for k in range(2, 65)]
    ex = make_task("fwe").examples(1, 500, seed=0)[0]
    seen = Counter(ex.prompt)
    assert seen["."] == counts[0]
    assert [seen[w] for w in ex.answer] == counts[1:4]


def test_cwe_counts() -> None:
    ex = make_task("cwe").examples(1, 100, seed=0)[0]
    seen = Counter(ex.prompt)
    assert sorted(seen[w] for w in ex.answer) == [4, 4, 4]
    assert sum(seen.values()) == 100 and len(seen) == 3 + 88
    task = make_task("cwe", common_repeats=6, uncommon_repeats=2, word_vocab=256)
    for length in (33, 34):  # 15 or 16 tokens of uncommon words: 7 pairs and a single, 8 pairs
        seen = Counter(task.examples(1, length, seed=0)[0].prompt)
        assert sum(seen.values()) == length
        assert (
            sorted(seen.values()) == [1] * (length % 2) + [2] * 7 + [2] * (1 - length % 2) + [6] * 3
        )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_task("niah_single", haystack="essays"), "haystack"),
        (lambda: make_task("niah_single", needle_queries=2), "needle_queries"),
        (lambda: make_task("niah_single", haystack="needle", key_vocab=1), "key_vocab"),
        (lambda: make_task("niah_multivalue").examples(1, 20), "length"),
        (lambda: make_task("vt", chains=6, hops=4), "chains"),
        (lambda: make_task("vt", chains=11, hops=1, value_digits=1), "value_digits"),
        (lambda: make_task("niah_multivalue", needle_values=11, value_digits=1), "value_digits"),
        (
            lambda: make_task(
                "niah_multivalue", haystack="needle", needle_values=10, value_digits=1
            ),
            "value_digits",
        ),
        (lambda: make_task("vt").examples(1, 10), "length"),
        (lambda: make_task("cwe", common_repeats=1), "common_repeats"),
        (lambda: make_task("cwe").examples(1, 11), "length"),
        (lambda: make_task("cwe", word_vocab=64).examples(1, 512), "word_vocab"),
        (lambda: make_task("fwe").examples(1, 20), "length"),
        (lambda: make_task("fwe", alpha=1.0), "alpha"),
        # valid at both ends of the training range, not in between (α = 3: up to 153 tokens)
        (lambda: make_task("fwe", alpha=3.0, train_lengths=(96, 200)), "length"),
        (lambda: make_task("fwe", top=64), "top"),
    ],
)
def test_bad_parameters_raise_naming_them(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
