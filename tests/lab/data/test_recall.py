"""Properties of posenc.lab.data.recall (MQAR) beyond the shared task tests: zoology's gap law,
distinct keys and values, every key asked once at its own slot, and errors naming the parameter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from posenc.lab.data.recall import gap_weights
from posenc.lab.data.tasks import make_task


def test_gap_weights_are_zoologys_power_law() -> None:
    weights = gap_weights(10, 0.01)
    raw = [0.01 * g ** (0.01 - 1) for g in range(1, 11)]  # zoology: a * arange(1, space+1)^(a-1)
    assert weights == pytest.approx([r / sum(raw) for r in raw], rel=1e-12)
    assert gap_weights(4, 1.0) == pytest.approx([0.25] * 4)


def test_zoology_layout_places_each_key_once_and_favours_near_slots() -> None:
    task = make_task("mqar", layout="zoology", slots_per_pair=4)
    first_slots: Counter[int] = Counter()
    for ex in task.examples(300, 4, seed=0):
        keys = ex.sequence[0:8:2]
        region = ex.sequence[8:]
        slots = [i // 2 for i in range(0, len(region), 2) if region[i] in keys]
        assert sorted(region[2 * s] for s in slots) == sorted(keys)
        first_slots.update(slots)
    # p(g) ~ (g + 1)^-0.99 over 16 slots: slot 0 about 15x slot 15 (sampled without replacement)
    assert first_slots[0] > 3 * first_slots[15]


def test_appended_layout_values_are_distinct() -> None:
    for ex in make_task("mqar").examples(50, 32, seed=1):
        values = ex.prompt[1:64:2]
        assert len(set(values)) == 32


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: make_task("mqar", num_values=8), "length"),  # test lengths above num_values
        (lambda: make_task("mqar", layout="zoology", queries=3), "queries"),
        (lambda: make_task("mqar", layout="grid"), "layout"),
        (lambda: make_task("mqar", power_a=0.0), "power_a"),
        (lambda: make_task("mqar", slots_per_pair=0), "slots_per_pair"),
    ],
)
def test_bad_parameters_raise_naming_them(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
