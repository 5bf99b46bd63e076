"""Conformance sweep: posenc's :func:`~posenc.integrations.hf.patch_rotary` on every RoPE family.

For each model family of the installed ``transformers`` whose modeling file defines a rotary
embedding, build a tiny random-weight model (no downloads: 2 layers, hidden 64, 4 heads), run
it on a fixed batch of its main input (token ids; for models without them, what the tiny config
says they read: audio features, raw audio, images, patches, a time series, draft-model
embeddings, :data:`~tools.hf_sweep.overrides.MAIN_INPUTS`), patch it with
``patch_rotary(model, keep_non_text=True, vision=True)`` (the ropes from the configs: text
rotaries, sequence rotaries, and the axial vision rotaries that have a convention) and compare
the outputs (logits, else the last hidden state, a codec's audio or latents, a backbone's
feature maps). Each family gets one status:

* ``equal``: max |diff| ≤ ``tolerance`` (5e-6), every rotary module ``patch_rotary`` replaces
  was replaced, and the modules that ran after patching are those HF ran (at least one);
* ``mismatch``: the patch ran but the outputs differ (the max diff is recorded), or it left a
  rotary module unpatched or never called (a silent no-op);
* ``refused``: ``patch_rotary`` raised ``ValueError`` (the message is recorded);
* ``not text RoPE``: the family's rotaries are none that ``patch_rotary`` replaces (or need
  inputs the sweep does not build), with the reason;
* ``could not build``: no tiny model could be built or run unpatched here (the error), or no
  rotary ran on its inputs (an ``equal`` would compare nothing).

Run from the repository root: ``python -m tools.hf_sweep [family ...] [--jobs N]
[--timeout SECONDS] [--markdown FILE] [--json FILE] [--dtype float64]``; the table printed is
the one in ``docs/hf.md`` (``--docs docs/hf.md --table-module tools/hf_sweep/table.py`` rewrite
it there and the expected statuses, from a whole sweep), and ``--conventions`` prints the tables of
:mod:`posenc.integrations.hf.conventions` read from the installed release instead. ``--jobs``
worker processes (default: the cores this process may use) check the families
(:mod:`tools.hf_sweep.parallel`; a family whose worker crashes or runs past ``--timeout`` is
``could not build``); ``--jobs 1`` checks them in this process. Either way the results are the
same and in the same order. Needs ``transformers`` (:mod:`posenc.integrations.hf` itself does
not).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import re
import time
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from posenc.integrations.hf.patch import HFRotaryAdapter, is_text_rotary, patch_rotary
from posenc.integrations.hf.sequence import SequenceRotaryAdapter, is_sequence_rotary
from posenc.integrations.hf.vision import VisionRotaryAdapter, is_vision_rotary
from tools.hf_sweep.conventions import conventions_source
from tools.hf_sweep.families import rope_families
from tools.hf_sweep.parallel import run_parallel
from tools.hf_sweep.table import NOT_EQUAL
from tools.hf_sweep.tiny import build_tiny, rotary_modules

__all__ = [
    "NOT_EQUAL",
    "FamilyResult",
    "check_family",
    "default_jobs",
    "docs_with_table",
    "main",
    "not_equal_module",
    "output_and_rotary_calls",
    "sweep",
    "table_markdown",
]

TOLERANCE = 5e-6
#: Seconds one family may take in a worker (the slowest takes a few on one idle core).
TIMEOUT = 300.0
STATUSES = ("equal", "mismatch", "refused", "not text RoPE", "could not build")
#: Families whose rotary is not a text RoPE, with the reason (read from their modeling files).
NOT_TEXT_ROPE: dict[str, str] = {
    "sam2_video": "its vision rotary (Sam2VideoVisionRotaryEmbedding, a convention of "
    "posenc.integrations.hf.vision, tables tested) runs in the memory attention of video "
    "tracking, which needs an inference session with prompts the sweep does not build",
    "sam3_tracker_video": "its vision rotary (Sam3TrackerVideoVisionRotaryEmbedding, a convention "
    "of posenc.integrations.hf.vision, tables tested) runs in the memory attention of video "
    "tracking, which needs an inference session with prompts the sweep does not build",
    "edgetam_video": "its vision rotary (EdgeTamVideoVisionRotaryEmbedding, a convention of "
    "posenc.integrations.hf.vision, tables tested) runs in the memory attention of video "
    "tracking, which needs an inference session with prompts the sweep does not build",
    "vjepa2": "its 3-D rotary is inline in the attention (rotate_queries_or_keys over frame, "
    "row and column ids): no rotary module to replace",
    "esmfold2": "its rotary (EsmFold2RotaryEmbedding) rotates by atoms' 3-D reference positions "
    "and space ids in the atom encoder, not by token index",
}


#: Why a family's difference exceeds the tolerance, measured (appended to its detail).
MISMATCH_REASONS: dict[str, str] = {
    "youtu": "float32 rounding at logits of order 9: HF's own float32 and float64 logits differ "
    "by 6.3e-6; with --dtype float64 the family is equal (1.7e-6: HF's float32 tables)",
}


@dataclass(frozen=True)
class FamilyResult:
    """One family's outcome: ``status`` (one of :data:`STATUSES`), a detail, the max diff."""

    family: str
    status: str
    detail: str = ""
    max_diff: float | None = None
    model: str = ""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """HF logs and warns a lot while building random tiny models; none of it matters here."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            hf_logging.set_verbosity(level)


def _output(model: nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    with torch.no_grad():
        out = model(**inputs)
    # audio codecs: the decoded audio, else the encoder's continuous latents (never the codes)
    for key in ("logits", "last_hidden_state", "prediction_logits", "audio_values", "latents"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value.double()
    if isinstance(out, tuple) and isinstance(out[0], torch.Tensor):
        return out[0].double()
    maps = getattr(out, "feature_maps", None)  # a backbone (EfficientLoFTR): every map
    if isinstance(maps, tuple) and maps and all(isinstance(m, torch.Tensor) for m in maps):
        return torch.cat([m.double().flatten() for m in maps])
    # contrastive towers (PE Audio): each tower's per-token states, where its rotary acts
    towers = [getattr(out, key, None) for key in out if key.endswith("_outputs")]
    states = [getattr(t, "last_hidden_state", None) for t in towers]
    tensors = [s.double().flatten() for s in states if isinstance(s, torch.Tensor)]
    if tensors and len(tensors) == len(states):
        return torch.cat(tensors)
    raise TypeError(f"no logits or hidden state in {type(out).__name__}")


def _first_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip().splitlines()[0]
    return re.sub(r"\s+", " ", text)[:300]


def check_family(
    family: str, tolerance: float = TOLERANCE, dtype: torch.dtype = torch.float32
) -> FamilyResult:
    """Build ``family`` tiny in ``dtype``, patch it with posenc's RoPE and compare outputs
    (see module doc)."""
    if family in NOT_TEXT_ROPE:
        return FamilyResult(family, "not text RoPE", NOT_TEXT_ROPE[family])
    with _quiet():
        try:
            built = build_tiny(family, dtype)
        except Exception as err:
            return FamilyResult(family, "could not build", _first_line(err))
        if isinstance(built, str):
            return FamilyResult(family, "not text RoPE", built)
        model, inputs, name = built
        rotaries = [(n, m) for n, m in model.named_modules() if "Rotary" in type(m).__name__]
        if not rotaries:
            why = f"the tiny {name} holds no rotary module (its rotary is in parts not built)"
            return FamilyResult(family, "could not build", why, None, name)
        if not any(_replaceable(m) for _, m in rotary_modules(model)):
            where = sorted({f"{type(m).__name__}" for _, m in rotaries})
            return FamilyResult(family, "not text RoPE", f"rotaries only in {where}", None, name)
        try:
            expected, hf_called = output_and_rotary_calls(model, inputs)
        except Exception as err:
            return FamilyResult(
                family, "could not build", "HF forward: " + _first_line(err), None, name
            )
        if not hf_called:  # an equal would be vacuous: nothing compared
            why = "no text or vision rotary ran on the tiny inputs"
            return FamilyResult(family, "could not build", why, None, name)
        try:
            patch_rotary(model, keep_non_text=True, vision=True)
        except ValueError as err:
            return FamilyResult(family, "refused", _first_line(err), None, name)
        except Exception as err:
            return FamilyResult(
                family, "mismatch", "patch crashed: " + _first_line(err), None, name
            )
        try:
            got, called = output_and_rotary_calls(model, inputs)
        except Exception as err:
            return FamilyResult(
                family, "mismatch", "patched forward: " + _first_line(err), None, name
            )
    left = [key for key, module in rotary_modules(model) if _replaceable(module)]
    kept = [key for key, module in rotary_modules(model) if not _replaceable(module)]
    idle = sorted(  # vision adapters the (token) inputs never reach: replaced, not compared
        key
        for key, module in model.named_modules()
        if isinstance(module, VisionRotaryAdapter) and key not in called
    )
    if left:
        return FamilyResult(family, "mismatch", f"silent no-op: {left} left unpatched", None, name)
    if called != hf_called:
        why = f"silent no-op: HF ran rotaries {sorted(hf_called)}, posenc {sorted(called)}"
        return FamilyResult(family, "mismatch", why, None, name)
    if got.shape != expected.shape:
        return FamilyResult(family, "mismatch", f"shape {tuple(got.shape)}", None, name)
    diff = (got - expected).abs().max().item()
    status = "equal" if diff <= tolerance else "mismatch"
    detail = "" if status == "equal" else f"max diff {diff:.1e}"
    if status == "mismatch" and family in MISMATCH_REASONS:
        detail = f"{detail} ({MISMATCH_REASONS[family]})"
    if idle:
        detail = f"{detail}; vision rotaries replaced, not run by the inputs: {idle}".lstrip("; ")
    if kept:
        detail = f"{detail}; HF's non-text rotaries kept: {kept}".lstrip("; ")
    return FamilyResult(family, status, detail, diff, name)


def _replaceable(module: nn.Module) -> bool:
    """Whether ``patch_rotary(..., vision=True)`` replaces ``module`` (an HF module left in
    place of one of these is a silent no-op)."""
    return is_text_rotary(module) or is_vision_rotary(module) or is_sequence_rotary(module)


def output_and_rotary_calls(model: nn.Module, inputs: dict[str, Any]) -> tuple[Tensor, set[str]]:
    """The model's output and the names of the text, vision and sequence rotary modules (HF's
    or adapters) that ran: after patching, the same names must run as before (else a patch is a
    no-op)."""
    called: set[str] = set()
    hooks = [
        module.register_forward_hook(lambda *_, key=key: called.add(key))
        for key, module in model.named_modules()
        if isinstance(module, (HFRotaryAdapter, VisionRotaryAdapter, SequenceRotaryAdapter))
        or (
            type(module).__name__.endswith(("RotaryEmbedding", "RotaryPositionalEmbedding"))
            and _replaceable(module)
        )
    ]
    try:
        return _output(model, inputs), called
    finally:
        for hook in hooks:
            hook.remove()


def _check(family: str, dtype: torch.dtype) -> FamilyResult:
    """:func:`check_family` at the default tolerance: what a worker runs."""
    return check_family(family, dtype=dtype)


def _failed(family: str, reason: str) -> FamilyResult:
    """A family whose worker crashed, hung or raised: its reason."""
    return FamilyResult(family, "could not build", reason)


def default_jobs() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def sweep(
    families: Sequence[str] | None = None,
    *,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
    jobs: int = 1,
    timeout: float = TIMEOUT,
) -> list[FamilyResult]:
    """:func:`check_family` in ``dtype`` for ``families`` (default: every RoPE family), in
    this process (``jobs=1``) or in ``jobs`` worker processes, each family within ``timeout``
    seconds (:func:`~tools.hf_sweep.parallel.run_parallel`). The results are in the order of
    ``families``; ``progress`` prints each family's line in that order as soon as the ones
    before it are done."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    families = list(families or rope_families())
    done: dict[int, tuple[FamilyResult, float]] = {}  # finished, not printed yet
    printed = 0

    def report(i: int, result: FamilyResult, seconds: float) -> None:
        nonlocal printed
        if not progress:
            return
        done[i] = result, seconds
        while printed in done:
            result, seconds = done.pop(printed)
            line = f"{result.family:28s} {seconds:5.1f}s {result.status:16s} {result.detail}"
            print(line, flush=True)
            printed += 1

    if jobs > 1:
        return run_parallel(
            families,
            _check,
            _failed,
            jobs=jobs,
            timeout=timeout,
            dtype=dtype,
            # the bulk of every model's imports, and the sweep's own
            preload=("transformers.modeling_utils", "tools.hf_sweep.sweep"),
            on_result=report,
        )
    results = []
    for i, family in enumerate(families):
        torch.manual_seed(0)
        start = time.perf_counter()
        result = check_family(family, dtype=dtype)
        report(i, result, time.perf_counter() - start)
        results.append(result)
    return results


def table_markdown(results: Sequence[FamilyResult]) -> str:
    """The sweep as a markdown table (family, status, detail) with the counts on top."""
    counts = Counter(r.status for r in results)
    lines = [
        ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES) + f" (of {len(results)})",
        "",
        "| family | model | status | detail |",
        "|---|---|---|---|",
    ]
    for r in results:
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.family} | {r.model} | {r.status} | {detail} |")
    return "\n".join(lines) + "\n"


DOCS_START, DOCS_END = "<!-- conformance table: start -->", "<!-- conformance table: end -->"


def docs_with_table(text: str, results: Sequence[FamilyResult]) -> str:
    """``text`` (``docs/hf.md``) with the block between :data:`DOCS_START` and
    :data:`DOCS_END` replaced by :func:`table_markdown` of ``results``."""
    start, end = text.find(DOCS_START), text.find(DOCS_END)
    if start < 0 or end < start:
        raise ValueError(f"the docs have no {DOCS_START} … {DOCS_END} block")
    table = table_markdown(results)
    return f"{text[: start + len(DOCS_START)]}\n{table}{text[end:]}"


def not_equal_module(results: Sequence[FamilyResult]) -> str:
    """The source of :mod:`tools.hf_sweep.table`: ``NOT_EQUAL`` from ``results``."""
    lines = [
        "# ruff: noqa: E501",
        '"""The conformance sweep\'s table (transformers 5.23.0): every RoPE family whose status',
        "is not ``equal``, with the status and the reason. ``tests/integrations/hf/test_sweep.py``",
        "asserts each family's status against it and ``docs/hf.md`` shows it. Generated by",
        "``python -m tools.hf_sweep --table-module tools/hf_sweep/table.py``; a family not listed",
        'must be ``equal``.\n"""',
        "",
        "from __future__ import annotations",
        "",
        "NOT_EQUAL: dict[str, tuple[str, str]] = {",
    ]
    quote = functools.partial(json.dumps, ensure_ascii=False)  # ruff's double quotes
    for r in results:
        if r.status != "equal":  # exploded, trailing commas: as ruff format leaves it
            lines += [f"    {quote(r.family)}: (", f"        {quote(r.status)},"]
            lines += [f"        {quote(r.detail)},", "    ),"]
    return "\n".join([*lines, "}", ""])


def main(argv: Sequence[str] | None = None) -> list[FamilyResult]:
    """Command line: run the sweep, print each family, write markdown / JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="families (default: all RoPE families)")
    parser.add_argument("--markdown", type=Path, help="write the table here")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument(
        "--docs", type=Path, help="replace the conformance table block of this file (docs/hf.md)"
    )
    parser.add_argument(
        "--table-module", type=Path, help="write NOT_EQUAL here (tools/hf_sweep/table.py)"
    )
    parser.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="models and inputs"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=default_jobs(),
        help="worker processes (default: this machine's cores; 1: no workers)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT,
        help=f"seconds one family may take in a worker (default {TIMEOUT:g})",
    )
    parser.add_argument(
        "--conventions",
        action="store_true",
        help="print posenc.integrations.hf.conventions' tables read from transformers; no sweep",
    )
    args = parser.parse_args(argv)
    if args.conventions:
        print(conventions_source(), end="")
        return []
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    torch.set_num_threads(1)
    results = sweep(
        args.families or None,
        progress=True,
        dtype=getattr(torch, args.dtype),
        jobs=args.jobs,
        timeout=args.timeout,
    )
    table = table_markdown(results)
    print(table.splitlines()[0])
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    if args.docs or args.table_module:
        if args.families:
            parser.error("--docs and --table-module need the whole sweep (no families named)")
        if args.docs:
            args.docs.write_text(docs_with_table(args.docs.read_text(), results))
        if args.table_module:
            args.table_module.write_text(not_equal_module(results))
    return results


if __name__ == "__main__":
    main()
