"""ruff and mypy are part of the tests, so CI keeps the code as typed and as clean as it is now."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and subprocess.run([sys.executable, "-m", name, "--version"],
                                                     capture_output=True).returncode != 0:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


def test_ruff_is_clean() -> None:
    done = subprocess.run([*_tool("ruff"), "check", "src", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_mypy_is_clean_on_src() -> None:
    done = subprocess.run([*_tool("mypy"), "src/fieldguide", "--ignore-missing-imports"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
