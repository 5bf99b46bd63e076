"""Shared test settings: deterministic seeds and float64 defaults where asked."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(params=["torch", "fast"])
def every_rotary_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """Run a test on the pure-torch rotation and on the fast kernels (``auto`` with no size
    threshold: numba wherever it serves the call); ``fast`` skips without the extra."""
    from posenc.rotary import kernels

    if request.param == "fast":
        if "numba" not in kernels.available_impls():
            pytest.skip("the fast extra (numba) is not installed")
        monkeypatch.setattr(kernels, "FAST_MIN_ELEMENTS", 0)
    with kernels.rotary_impl("torch" if request.param == "torch" else "auto"):
        yield request.param
