"""Shared fixtures: the fieldguide command of this checkout, and workload scripts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """One inductor cache for this test run, shared by its compile jobs and fresh in every run:
    a cold compile is what a first run costs, and no run may hide it behind an earlier one's cache."""
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fieldguide-tests-inductor-")
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]


def run_fieldguide(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "FIELDGUIDE_WORKLOAD_SECONDS": "60", "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    return subprocess.run([*FIELDGUIDE, *args], capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd)


@pytest.fixture
def workload_process():
    """Start a zoo workload as a plain process (no agent), for attach tests; killed afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, warmup: float = 6.0) -> subprocess.Popen[bytes]:
        from fieldguide import workloads

        # Under its declared launcher (torchrun for a multi-rank workload): the test attaches to the launcher.
        proc = subprocess.Popen(workloads.command(name, sys.executable),
                                env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="90"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        started.append(proc)
        time.sleep(warmup)
        assert proc.poll() is None, f"{name} exited early"
        return proc

    yield start
    for proc in started:
        # The whole group: a killed job's DataLoader workers would otherwise linger.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
