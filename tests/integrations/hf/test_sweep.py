"""The conformance sweep: every RoPE family of the installed transformers, built tiny with random
weights, gives HF's logits after patch_rotary (≤ 5e-6) unless the sweep's table
(tools/hf_sweep/table.py, NOT_EQUAL) states why not; a family that changes status fails here so
that the table in docs/hf.md stays true. The per-family test is slow (about a minute on one
idle core for all 198 families); `make test-slow` runs it. The parallel sweep gives the serial
results (its runner: test_sweep_parallel.py)."""

from __future__ import annotations

import ast

import pytest
import torch

transformers = pytest.importorskip("transformers")
from tools.hf_sweep import overrides, sweep  # noqa: E402
from tools.hf_sweep.families import rope_families  # noqa: E402
from tools.hf_sweep.sweep import NOT_EQUAL, STATUSES, check_family  # noqa: E402

FAMILIES = rope_families()


def test_every_stated_family_is_installed_and_has_a_reason() -> None:
    assert set(NOT_EQUAL) <= set(FAMILIES)
    for family, (status, reason) in NOT_EQUAL.items():
        assert status in STATUSES and status != "equal", family
        assert reason.strip(), family


def test_a_family_whose_rotaries_never_run_is_not_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nemotron 3.5 Transcribe builds and runs on token ids alone, but its text decoder is NoPE
    and its rotaries are the audio encoder's: without its audio input no rotary runs, so
    'equal' would be vacuous."""
    monkeypatch.delitem(overrides.EXTRA_INPUTS, "nemotron3_5_transcribe")
    result = check_family("nemotron3_5_transcribe")
    assert (result.status, result.detail) == (
        "could not build",
        "no text or vision rotary ran on the tiny inputs",
    )


def test_vision_rotaries_the_inputs_never_reach_are_named() -> None:
    """Qwen2-VL on token ids: its vision rotary is replaced (vision=True) but never runs, and
    the row says so rather than counting it compared."""
    result = check_family("qwen2_vl")
    assert result.status == "equal"
    assert result.detail == (
        "vision rotaries replaced, not run by the inputs: ['model.visual.rotary_pos_emb']"
    )


def test_float64_comparison_leaves_only_hf_float32_tables() -> None:
    """--dtype float64: model and inputs in float64; HF's rotary still builds its tables in
    float32, so the difference is that rounding, far below the tolerance."""
    result = check_family("llama", dtype=torch.float64)
    assert result.status == "equal" and result.max_diff is not None and result.max_diff < 1e-6


@pytest.mark.slow  # three tiny models built twice (esmfold2's status is stated): about 6 s
def test_parallel_sweep_gives_the_serial_results_in_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Equal, mismatch (its max diff bit for bit), refused, not text RoPE: two workers give
    what one process gives, and print the families' lines in the order asked."""
    families = ["esmfold2", "youtu", "llama", "hunyuan_vl"]
    serial = sweep.sweep(families, jobs=1)
    assert [r.status for r in serial] == ["not text RoPE", "mismatch", "equal", "refused"]
    capsys.readouterr()
    assert sweep.sweep(families, jobs=2, progress=True) == serial
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == families


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--jobs", "0"], "--jobs must be >= 1, got 0"),
        (["--timeout", "-1"], "--timeout must be > 0 seconds, got -1.0"),
    ],
)
def test_command_line_refuses_bad_jobs_or_timeout(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        sweep.main([*argv, "llama"])
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_family_conformance(family: str) -> None:
    result = check_family(family)
    expected = NOT_EQUAL.get(family, ("equal", ""))[0]
    assert result.status == expected, f"{family}: {result.status} ({result.detail})"


def test_table_writers_round_trip() -> None:
    """--table-module writes NOT_EQUAL for the results given (equal families left out);
    --docs replaces only the marked block, and refuses a file without one."""
    results = [
        sweep.FamilyResult("a", "equal", "", 0.0, "A"),
        sweep.FamilyResult("b", "refused", 'ValueError: it\'s "odd" | x', None, "B"),
    ]
    source = sweep.not_equal_module(results)
    tree = ast.parse(source)  # the generated module: its NOT_EQUAL literal
    value = next(n.value for n in tree.body if isinstance(n, ast.AnnAssign) and n.value)
    assert ast.literal_eval(value) == {"b": ("refused", 'ValueError: it\'s "odd" | x')}
    text = f"intro\n{sweep.DOCS_START}\nold\n{sweep.DOCS_END}\nafter\n"
    new = sweep.docs_with_table(text, results)
    assert new.startswith(f"intro\n{sweep.DOCS_START}\n1 equal, 0 mismatch, 1 refused")
    assert '| b | B | refused | ValueError: it\'s "odd" \\| x |' in new
    assert new.endswith(f"{sweep.DOCS_END}\nafter\n") and "old" not in new
    with pytest.raises(ValueError, match="the docs have no"):
        sweep.docs_with_table("no block", results)
