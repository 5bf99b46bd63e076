"""docs/img/atlas_{audio,video,vla}.png, drawn from the tables of docs/results.md §9.

Run from the repository root: ``python -m tools.atlas_figures`` (``--out DIR`` to write
elsewhere). Each figure is :func:`posenc.lab.atlas.draw_atlas` of the first table under its
section's heading (mean ± std over the seeds the section states), so the figure and the table
it sits beside say the same numbers; the dashed line is the section's own reference (chance,
or the VLA's "always stay" baseline), read from the section's text.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from posenc.lab.atlas import AtlasSeries, AtlasSummary, draw_atlas

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results.md"
TRAINED = " (trained)"


@dataclass(frozen=True)
class Section:
    """One atlas figure: the heading its table follows, the figure's file and title."""

    heading: str
    filename: str
    title: str
    reference: str  # "chance" or "always stay"


SECTIONS = (
    Section(
        "### 9.1 Audio", "atlas_audio.png", "Audio: keyword spotting, trained on 1.024 s clips",
        "chance",
    ),
    Section(
        "### 9.2 Video", "atlas_video.png", "Video: moving digits, trained on F = 4 frames",
        "chance",
    ),
    Section(
        "### 9.3 Vision-language-action", "atlas_vla.png",
        "Vision-language-action: per-slot action accuracy, trained on 4 × 4 grids",
        "always stay",
    ),
)  # fmt: skip

_CELL = re.compile(r"^\s*\**\s*([0-9.]+)\s*±\s*([0-9.]+)\s*\**\s*$")


def section_text(document: str, heading: str) -> str:
    """The text of the section that starts with ``heading``, up to the next heading of the
    same or a higher level."""
    starts = [m.start() for m in re.finditer(rf"^{re.escape(heading)}", document, re.MULTILINE)]
    if len(starts) != 1:
        raise ValueError(f"expected one heading {heading!r} in the document, found {len(starts)}")
    level = len(heading) - len(heading.lstrip("#"))
    rest = document[starts[0] + len(heading) :]
    end = re.search(rf"^#{{1,{level}}} ", rest, re.MULTILINE)
    return heading + (rest[: end.start()] if end else rest)


def first_table(text: str) -> tuple[list[str], list[list[str]]]:
    """``(header, body)`` of the first Markdown table in ``text``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("|") and index + 1 < len(lines) and lines[index + 1].startswith("|--"):
            table = [line]
            for following in lines[index + 2 :]:
                if not following.startswith("|"):
                    break
                table.append(following)
            cells = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in table]
            return cells[0], cells[1:]
    raise ValueError("no Markdown table in the section")


def summary_from_table(
    header: Sequence[str], body: Sequence[Sequence[str]], seeds: int
) -> AtlasSummary:
    """The table as an :class:`~posenc.lab.atlas.AtlasSummary`: the columns ending in
    ``(trained)`` and after are conditions, the ones before name the row (the last of them the
    encoding, its first word the colour's name); cells are ``mean ± std``."""
    first = next((i for i, name in enumerate(header) if name.endswith(TRAINED)), None)
    if first is None or first == 0:
        raise ValueError(f"no '(trained)' column after the name columns in {list(header)}")
    conditions = {index: name for index, name in enumerate(header[first:])}
    series = []
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"row {list(row)} has {len(row)} cells; the header has {len(header)}")
        names = [cell.strip("*") for cell in row[:first]]
        points = {}
        for index, cell in enumerate(row[first:]):
            match = _CELL.match(cell)
            if match is None:
                raise ValueError(f"cell {cell!r} of {names} is not 'mean ± std'")
            points[index] = (float(match.group(1)), float(match.group(2)), seeds)
        group = " · ".join(names[:-1])
        series.append(AtlasSeries(names[-1].split()[0], " · ".join(names), points, group))
    return AtlasSummary(conditions, tuple(series))


def seeds_of(text: str) -> int:
    """The seed count the section states (``"3 seeds"``), which must be one number."""
    counts = {int(n) for n in re.findall(r"(\d+) seeds", text)}
    if len(counts) != 1:
        raise ValueError(f"the section must state one seed count ('N seeds'), found {counts}")
    return counts.pop()


def references(text: str, kind: str, conditions: dict[int, str]) -> dict[int, float]:
    """The section's reference accuracy per condition: ``chance 0.125`` (every condition) or
    ``"always stay" baseline is 0.722 (G4), 0.613 (G6), ...`` (per condition label)."""
    if kind == "chance":
        match = re.search(r"chance (0\.\d+)", text)
        if match is None:
            raise ValueError("the section states no 'chance 0.x'")
        return dict.fromkeys(conditions, float(match.group(1)))
    sentence = re.search(r'"always stay"\s+baseline is\s+(.*?\))\.(?:\s|$)', text, re.DOTALL)
    if sentence is None:
        raise ValueError("the section states no '\"always stay\" baseline is ...'")
    values = dict(
        (label, float(v)) for v, label in re.findall(r"(\d\.\d+) \(([^)]+)\)", sentence.group(1))
    )
    by_label = {label.removesuffix(TRAINED): index for index, label in conditions.items()}
    if set(values) != set(by_label):
        raise ValueError(f"baselines for {sorted(values)}, conditions {sorted(by_label)}")
    return {by_label[label]: value for label, value in values.items()}


def draw(document: str, section: Section) -> Figure:
    """``section``'s figure from ``document`` (the text of docs/results.md)."""
    text = section_text(document, section.heading)
    header, body = first_table(text)
    summary = summary_from_table(header, body, seeds_of(text))
    label = "chance" if section.reference == "chance" else '"always stay" baseline'
    return draw_atlas(
        summary,
        section.title,
        baselines=references(text, section.reference, dict(summary.conditions)),
        baseline_label=label,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the Markdown to read")
    args = parser.parse_args(argv)
    document = args.results.read_text()
    args.out.mkdir(parents=True, exist_ok=True)
    for section in SECTIONS:
        path = args.out / section.filename
        draw(document, section).savefig(path, dpi=110)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
