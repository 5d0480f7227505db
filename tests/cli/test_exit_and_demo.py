"""`python -m fieldguide.frontends.cli` keeps its output through a pipe; the demo without torch is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_bad_input import assert_one_line_error
from tests.conftest import ROOT, run_fieldguide

SRC = str(ROOT / "src")


def plain_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONUNBUFFERED (set here, but not on a user's shell)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "FIELDGUIDE_DEMO_PYTHON")}
    return {**env, "NO_COLOR": "1", **extra}


def test_module_entry_point_flushes_stdout_into_a_pipe() -> None:
    # stdout is a pipe here (block buffered): os._exit without a flush would lose every line.
    proc = subprocess.run([sys.executable, "-m", "fieldguide.frontends.cli", "playbooks"], capture_output=True, text=True,
                          env=plain_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "slow-training" in proc.stdout


def test_module_entry_point_flushes_stderr_and_keeps_the_status(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fieldguide.frontends.cli", "report", str(tmp_path / "none.json")],
                          capture_output=True, text=True, env=plain_env(), timeout=60)
    assert_one_line_error(proc, 2, "no such report")


def test_module_entry_point_into_a_closed_pipe_is_quiet() -> None:
    # `fieldguide playbooks | head -0`: the reader is gone; no BrokenPipe traceback.
    proc = subprocess.run(f"{sys.executable} -m fieldguide.frontends.cli playbooks | head -c 0", shell=True,
                          capture_output=True, text=True, env=plain_env(), timeout=60)
    assert "Traceback" not in proc.stderr


@pytest.fixture
def python_without_torch(tmp_path: Path) -> Path:
    """A Python that runs but cannot import torch: this one without site-packages."""
    fake = tmp_path / "python-no-torch"
    fake.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    fake.chmod(0o755)
    done = subprocess.run([str(fake), "-c", "import torch"], capture_output=True)
    assert done.returncode != 0
    return fake


def test_demo_with_a_demo_python_that_has_no_torch_says_how_to_get_it(python_without_torch: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fieldguide", "demo", "--no-tui"], capture_output=True, text=True,
                          env=plain_env(FIELDGUIDE_DEMO_PYTHON=str(python_without_torch)), timeout=60)
    assert_one_line_error(proc, 2, "FIELDGUIDE_DEMO_PYTHON", "has no torch", "pip install 'fieldguide[demo]'")
    assert proc.stdout == ""  # nothing was launched


def test_demo_in_an_interpreter_without_torch_says_how_to_get_it(python_without_torch: Path) -> None:
    # fieldguide's own process without torch (the CLI imports nothing but the standard library before the check).
    proc = subprocess.run([str(python_without_torch), "-m", "fieldguide", "demo", "--no-tui"], capture_output=True,
                          text=True, env=plain_env(PYTHONPATH=SRC), timeout=60)
    assert_one_line_error(proc, 2, "has no torch", "pip install 'fieldguide[demo]'", "FIELDGUIDE_DEMO_PYTHON")


def test_demo_python_that_cannot_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "fieldguide", "demo", "--no-tui"], capture_output=True, text=True,
                          env=plain_env(FIELDGUIDE_DEMO_PYTHON=str(tmp_path / "no-such-python")), timeout=60)
    assert_one_line_error(proc, 2, "FIELDGUIDE_DEMO_PYTHON", "cannot be run")


def test_demo_python_with_torch_is_used_for_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from fieldguide import workloads
    from fieldguide.frontends import cli

    monkeypatch.setenv("FIELDGUIDE_DEMO_PYTHON", sys.executable)
    assert cli.demo_command() == [sys.executable, str(workloads.path(workloads.DEMO))]
    monkeypatch.delenv("FIELDGUIDE_DEMO_PYTHON")
    assert cli.demo_command()[0] == sys.executable


def test_a_watch_whose_job_crashes_exits_3_not_0(tmp_path: Path) -> None:
    """Issue 33: `fieldguide watch -- python train.py && echo healthy` said healthy for a job that
    never started (status 2, no step): a crashed or killed job, or one that ended before its baseline,
    gives 3, as `diagnose` does, and the end event says why."""
    import json
    import sys

    folder = tmp_path / "watch"
    proc = run_fieldguide("watch", "--report-dir", str(folder), "--", sys.executable, str(tmp_path / "nosuchscript.py"),
                          timeout=60)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    end = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["job_failed"] == "exited with status 2"
