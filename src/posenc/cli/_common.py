"""Helpers the ``posenc`` subcommands share: help text without Sphinx markup, and an argparse
type for counts.

Used only inside :mod:`posenc.cli` (standard library only, so ``posenc --help`` stays cheap).
"""

from __future__ import annotations

import argparse
import re

__all__ = ["plain_help", "positive_int"]

_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]+)``")


def plain_help(text: str) -> str:
    """``text`` without Sphinx markup: ``:class:`~a.b.C``` becomes ``C``, ``:data:`x``` becomes
    ``x``, a double-backquoted literal its content; lines of a boxed help table keep their
    width (the removed characters are padded back before the closing border)."""

    def strip(line: str) -> str:
        line = _ROLE.sub(
            lambda m: m.group(1).rsplit(".", 1)[-1] if "~" in m.group(0) else m.group(1), line
        )
        # a literal that the help's line wrapping split keeps no stray delimiters either
        return _LITERAL.sub(r"\1", line).replace("``", "")

    lines = []
    for line in text.splitlines():
        if len(line) >= 2 and line[0] == "│" and line[-1] == "│":
            inner = line[1:-1]
            line = "│" + strip(inner).ljust(len(inner)) + "│"
        else:
            line = strip(line)
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def positive_int(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer >= 1 (argparse names the option and exits
    with status 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer (>= 1), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value
