"""The cross-signal atlas in brief: docs/results.md §9's answer to "which encoding for which
signal", one :class:`AtlasEntry` per signal (:data:`ATLAS`); tests/lab/test_findings.py
checks each entry's numbers against docs/results.md. The atlas's tables and figures are
:mod:`posenc.lab.atlas`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ATLAS", "ATLAS_SECTION", "AtlasEntry"]


@dataclass(frozen=True)
class AtlasEntry:
    """One signal of the cross-signal atlas: the encoding the measurements favour and why.

    Attributes:
        signal: the kind of data and its dimensions.
        answer: the encoding (or rule) the measurements favour, in words.
        margin: the numbers behind it, as docs/results.md gives them.
        section: where docs/results.md measures it.
    """

    signal: str
    answer: str
    margin: str
    section: str


#: docs/results.md's section that answers "which encoding for which signal".
ATLAS_SECTION = "docs/results.md §9, Which encoding for which signal: the atlas"

#: The atlas in brief (docs/results.md §9.4's table, with text from §1 and graphs from §8):
#: tests/lab/test_findings.py checks each entry's numbers against docs/results.md.
ATLAS: tuple[AtlasEntry, ...] = (
    AtlasEntry(
        "text, 1D, past the training length",
        "ALiBi",
        "perplexity 7.602 at T and 7.469 at 8×T, where RoPE rises from 6.649 to 17.748 "
        "(the demo's 3 seeds)",
        "§1, The demo",
    ),
    AtlasEntry(
        "image, 2D",
        "any encoding: having one matters, which one barely does",
        "eight of nine within 1.6 points; none 21 points lower",
        "§4-5, §9.4",
    ),
    AtlasEntry(
        "audio as frames, 1D",
        "RoPE",
        "0.989 in distribution; keeps 0.965 at 2×",
        "§9.1, §9.4",
    ),
    AtlasEntry(
        "audio as patches, 2D",
        "axial RoPE",
        "best at 4× (0.70); without an encoding a patch loses its band (0.57)",
        "§9.1, §9.4",
    ),
    AtlasEntry(
        "video, 3D",
        "a relative, axis-separated rotary (axial RoPE, M-RoPE, ComRoPE-AP) or 3D sin-cos",
        "unsettled in distribution (unconverged runs); LieRE and VideoRoPE's diagonal fail "
        "beyond the trained size",
        "§9.2, §9.4",
    ),
    AtlasEntry(
        "image + text + actions (VLA)",
        "M-RoPE / axial RoPE: number the image by (row, column)",
        "0.99-1.00 vs flat 0.89",
        "§9.3, §9.4",
    ),
    AtlasEntry(
        "graphs (CSL)",
        "SignNet or random-walk return probabilities",
        "100 %; Laplacian eigenvectors with sign flips 95.1 %; no encoding 10.0 % (chance)",
        "§8",
    ),
)
