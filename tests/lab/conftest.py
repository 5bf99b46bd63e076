"""Lab tests run on one torch thread (tiny models are fastest so; bitwise resume needs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from posenc.lab.run import torch_threads


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    with torch_threads(1):
        yield
