"""docs/results.md against the code: its links into lab.md resolve and the context-free loss
it quotes for the demo setting is what :func:`context_free_loss` gives."""

from __future__ import annotations

import math
import platform
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
RESULTS = DOCS / "results.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_links_into_lab_md_name_existing_sections() -> None:
    headings = [
        line.lstrip("#").strip()
        for line in (DOCS / "lab.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    ]
    anchors = {_slug(h) for h in headings}
    links = re.findall(r"\(lab\.md#([^)\s]+)\)", RESULTS.read_text(encoding="utf-8"))
    assert links, "results.md should link lab.md's claims rule"
    missing = [link for link in links if link not in anchors]
    assert not missing, f"results.md links lab.md sections that do not exist: {missing}"


def test_rule_paragraph_quotes_the_learned_fraction() -> None:
    from posenc.lab.claims import LEARNED_LOSS_FRACTION

    text = RESULTS.read_text(encoding="utf-8")
    paragraph = text[text.index("**How verdicts are judged now.**") : text.index("## 1.")]
    assert f"above {LEARNED_LOSS_FRACTION:g} of the context-free unigram loss" in paragraph


@pytest.mark.skipif(
    platform.python_version() != "3.11.7",
    reason="the corpus is the running Python's standard library; the figure is 3.11.7's",
)
def test_demo_context_free_loss_is_the_codes() -> None:
    from posenc.lab.data.corpus import context_free_loss, eval_windows
    from posenc.lab.demo import DEMO_CONFIG

    corpus = DEMO_CONFIG.data.load()
    train_len = DEMO_CONFIG.data.train_len
    targets = eval_windows(corpus.test[: DEMO_CONFIG.eval_tokens + 1], train_len)[:, 1:]
    loss = context_free_loss(corpus.train, targets)
    quoted = re.search(
        r"gives\s+(\d\.\d{3})\s+nats\s+per\s+byte\s+at\s+the\s+demo\s+setting",
        RESULTS.read_text(encoding="utf-8"),
    )
    assert quoted is not None, "results.md should quote the demo setting's context-free loss"
    assert f"{loss:.3f}" == quoted.group(1)
    # the page's "at most 0.70 of it": the worst model at T of the demo setting's tables,
    # linear-attention NoPE (ppl 9.917 softmax, 10.045 linear)
    assert math.log(10.045) / loss <= 0.70
