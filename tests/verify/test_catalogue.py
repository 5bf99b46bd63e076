"""Each public bug class: its buggy arrays for a realistic config are flagged with exactly
that cause; the correct arrays for the same config pass."""

from __future__ import annotations

import pytest
import torch

from posenc.verify import BUG_CLASSES, bug_class, reference_arrays, verify
from tools.verify_cases import BUG_CASES, BugCase, bug_inputs


def _id(case: BugCase) -> str:
    return f"{case.bug}-{case.family}-{case.layer_type or case.component}-{case.variant}"


@pytest.mark.parametrize("case", BUG_CASES, ids=_id)
def test_the_bug_is_flagged_with_its_cause(case: BugCase) -> None:
    arrays, kwargs = bug_inputs(case)
    config = kwargs.pop("config")
    report = verify(config, arrays, **kwargs)
    assert not report.ok
    assert report.cause is not None and report.cause.name == case.bug, report.summary()
    assert report.cause.sources


@pytest.mark.parametrize("case", BUG_CASES, ids=_id)
def test_the_correct_arrays_of_the_same_config_pass(case: BugCase) -> None:
    arrays, kwargs = bug_inputs(case)
    config = kwargs.pop("config")
    ref = reference_arrays(
        config, arrays["positions"], q=arrays.get("q"), k=arrays.get("k"), **kwargs
    )
    correct = {"positions": arrays["positions"]}
    for key in ("cos", "sin", "q_rotated", "k_rotated"):
        if key in arrays:
            correct[key] = ref[key].to(
                arrays[key].dtype if key in ("cos", "sin") else torch.float32
            )
    for key in ("q", "k"):
        if key in arrays:
            correct[key] = arrays[key]
    report = verify(config, correct, **kwargs)
    assert report.ok and report.cause is None, report.summary()


def test_every_bug_class_has_a_case_sources_and_a_unique_name() -> None:
    names = [bug.name for bug in BUG_CLASSES]
    assert len(set(names)) == len(names)
    assert set(names) == {case.bug for case in BUG_CASES}
    for bug in BUG_CLASSES:
        assert bug.description and bug.sources and all(bug.sources)


def test_a_class_that_does_not_apply_says_so_and_unknown_names_are_errors() -> None:
    llama = {"head_dim": 64, "rope_theta": 1e4}
    with pytest.raises(ValueError, match="does not apply"):
        bug_class("proportional_width").build(llama, torch.arange(8))
    with pytest.raises(ValueError, match="name must be one of"):
        bug_class("no_such_bug")
