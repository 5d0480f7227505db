"""A Ctrl-C (or SIGTERM/SIGHUP) after the walk ended, while the launched job is being ended, still
gives the summary and the report."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import fieldguide.frontends.headless as headless
import fieldguide.walk.session as session_module
from fieldguide.frontends.cli import _Interrupts
from fieldguide.report.findings import environment_from, findings_from_walk


class EndingSlowly:
    """A launched target whose ending is interrupted by the user (the signal lands in close())."""

    kind, pid = "launch", 4242

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        signal.raise_signal(signal.SIGINT)
        self.closed = True


def test_an_interrupt_while_the_job_is_ended_keeps_the_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               walk_with: Any) -> None:
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8}})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [])
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 4242, "cmdline": ["python", "train.py"]}, env)
    target = EndingSlowly()
    monkeypatch.setattr(session_module, "open_target", lambda *a, **k: target)
    monkeypatch.setattr(session_module, "Session", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(headless, "walk_off_main_thread", lambda *a, **k: (findings, False))
    previous = signal.getsignal(signal.SIGINT)
    try:
        code = headless.diagnose_headless("slow-training", None, ["python", "train.py"], tmp_path / "r.json", None,
                                          None, show_output=False, on_interrupt=_Interrupts())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert target.closed  # the job was ended
    assert code == 1 and json.loads((tmp_path / "r.json").read_text())["verdict"] == "departure"
