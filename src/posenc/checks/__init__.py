"""The property checks of ``posenc check``."""

from __future__ import annotations

from posenc.checks.encodings import (
    CheckResult,
    equivariance_gaps,
    format_result,
    graph_checks,
    run_checks,
)

__all__ = ["CheckResult", "equivariance_gaps", "format_result", "graph_checks", "run_checks"]
