"""One torch thread for the verify tests: their tensors are small, and on a loaded machine
torch's spin-waiting threads made the folder take 59 s instead of 8 s (2 cores, load 4.6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
