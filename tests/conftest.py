"""Shared test settings: deterministic seeds and float64 defaults where asked."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
