"""Fixtures of the real-GPU tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cuda() -> None:
    """Skip cleanly where torch has no CUDA (a CPU build, or no GPU)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
