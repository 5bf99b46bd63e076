"""The verdict of :func:`posenc.verify.verify`: :class:`VerifyReport`, as a summary a person
reads and a dict a program reads (``posenc verify --json``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from posenc.verify.catalogue import BugClass
from posenc.verify.compare import KeyReport
from posenc.verify.spec import RopeSpec

__all__ = ["VerifyReport"]


@dataclass(frozen=True)
class VerifyReport:
    """The verdict of :func:`verify`.

    Args:
        ok: every array equals the reference within the tolerance.
        keys: one :class:`~posenc.verify.compare.KeyReport` per array checked.
        cause: the bug class the arrays match (``None`` when ok or unexplained).
        variant: what exactly the matching variant does wrong.
        hint: for a mismatch no bug class explains, where it is and what it suggests.
        spec: the reference's reading of the config.
        layout: the table layout compared.
    """

    ok: bool
    keys: tuple[KeyReport, ...]
    cause: BugClass | None
    variant: str | None
    hint: str | None
    spec: RopeSpec
    layout: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``posenc verify --json``)."""
        spec = self.spec
        return {
            "ok": self.ok,
            "cause": None if self.cause is None else self.cause.name,
            "cause_description": None if self.cause is None else self.cause.description,
            "sources": [] if self.cause is None else list(self.cause.sources),
            "variant": self.variant,
            "hint": self.hint,
            "reference": {
                "model_type": spec.model_type,
                "layer_type": spec.layer_type,
                "rope_type": spec.parameters.rope_type,
                "base": spec.base,
                "head_dim": spec.head_dim,
                "rotary_dim": spec.rotary_dim,
                "attention_factor": spec.attention_factor,
                "layout": self.layout,
                "mrope_axes": None if spec.axes is None else list(spec.axes),
            },
            "arrays": [
                {
                    "key": r.key,
                    "shape": list(r.shape),
                    "reference_shape": list(r.reference_shape),
                    "dtype": r.dtype,
                    "ok": r.ok,
                    "max_abs": r.max_abs if math.isfinite(r.max_abs) else None,
                    "max_rel": r.max_rel if math.isfinite(r.max_rel) else None,
                    "mismatches": r.mismatches,
                    "first_row": r.first_row,
                    "first_position": None if r.first_position is None else list(r.first_position),
                    "channels": list(r.channels),
                }
                for r in self.keys
            ],
        }

    def summary(self) -> str:
        """A few lines a person reads: verdict, per array where and how much, cause, sources."""
        spec = self.spec
        lines = [
            f"reference: {spec.model_type or 'config'}"
            + (f" [{spec.layer_type}]" if spec.layer_type else "")
            + f", rope_type {spec.parameters.rope_type}, base {spec.base:g}, rotary_dim "
            f"{spec.rotary_dim} of {spec.head_dim}, A {spec.attention_factor:.6g}, layout "
            f"{self.layout}",
            f"{'key':<12} {'shape':<18} {'dtype':<9} {'max abs':>10} {'max rel':>10}  verdict",
        ]
        for r in self.keys:
            verdict = "equal" if r.ok else f"{r.mismatches} entries differ"
            if r.shape != r.reference_shape:
                verdict = f"shape differs from the reference's {list(r.reference_shape)}"
            if r.first_row is not None:
                verdict += f"; first at row {r.first_row} (position {_fmt(r.first_position)})"
                verdict += f", channels {_ranges(r.channels)}"
            errors = (
                f"{r.max_abs:>10.3g} {r.max_rel:>10.3g}"
                if math.isfinite(r.max_abs)
                else f"{'-':>10} {'-':>10}"
            )
            lines.append(f"{r.key:<12} {list(r.shape)!s:<18} {r.dtype:<9} {errors}  {verdict}")
        if self.ok:
            lines.append("OK: equal to posenc's float64 reference within one rounding")
        elif self.cause is not None:
            lines.append(f"MISMATCH, likely cause: {self.cause.name}: {self.variant}")
            lines.append(f"  {self.cause.description}")
            lines.append(f"  sources: {', '.join(self.cause.sources)}")
        else:
            lines.append(f"MISMATCH, no known bug class matches. {self.hint}")
        return "\n".join(lines)


def _fmt(position: tuple[float, ...] | None) -> str:
    if position is None:
        return "-"
    values = [f"{v:g}" for v in position]
    return values[0] if len(values) == 1 else "(" + ", ".join(values) + ")"


def _ranges(values: tuple[int, ...]) -> str:
    """``0-3, 8, 10-11`` (at most 6 runs shown)."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:6]]
    return ", ".join(text) + (", ..." if len(runs) > 6 else "")
