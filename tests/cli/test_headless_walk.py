"""The headless walk runs off the main thread: an interrupt lands where no lock is held."""

from __future__ import annotations

import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from fieldguide.errors import TargetFailed
from fieldguide.frontends.headless import walk_off_main_thread


class BlockingSession:
    """Walks until cancelled (or raises `failure`), recording the thread it walked on."""

    def __init__(self, failure: BaseException | None = None, ignores_cancel: bool = False):
        self.runner = SimpleNamespace(cancelled=threading.Event())
        self.walk = SimpleNamespace(current="input.data-wait", finished=False)
        self.failure = failure
        self.ignores_cancel = ignores_cancel
        self.walked_on: threading.Thread | None = None
        self.note = ""

    def run(self, on_result: Any) -> Any:
        self.walked_on = threading.current_thread()
        if self.failure is not None:
            raise self.failure
        while not self.runner.cancelled.wait(0.05) or self.ignores_cancel:
            time.sleep(0.05)
        return self.findings()

    def cancel(self, note: str) -> None:
        self.note = note
        self.runner.cancelled.set()

    def findings(self) -> Any:
        return SimpleNamespace(note=self.note, first_departure=None, experiments=[])


def _interrupt_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, signal.raise_signal, args=(signal.SIGINT,))
    timer.start()
    return timer


def test_an_interrupt_cancels_the_walk_which_ran_on_another_thread() -> None:
    session = BlockingSession()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_in(0.3)
        findings, interrupted = walk_off_main_thread(session, Console(stderr=True))  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted
    assert session.walked_on is not None and session.walked_on is not threading.main_thread()
    assert findings.note.startswith("interrupted by the user (Ctrl-C) at node input.data-wait")


def test_a_walk_that_does_not_unwind_in_time_still_gives_its_findings() -> None:
    session = BlockingSession(ignores_cancel=True)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_in(0.3)
        started = time.monotonic()
        findings, interrupted = walk_off_main_thread(session, Console(stderr=True), unwind_s=0.5)  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted and "the report is partial" in findings.note
    assert time.monotonic() - started < 5


def test_an_error_the_walk_raised_reaches_the_caller() -> None:
    session = BlockingSession(failure=TargetFailed("python exited with status 1 before it could be measured"))
    with pytest.raises(TargetFailed, match="before it could be measured"):
        walk_off_main_thread(session, Console(stderr=True))  # type: ignore[arg-type]


def test_a_sigterm_is_named_as_sigterm_not_as_ctrl_c() -> None:
    from fieldguide.frontends.cli import _interrupt

    session = BlockingSession()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    count = _interrupt.count
    _interrupt.count = 0  # a walk earlier in this process may have left it past its first signal
    try:
        timer = threading.Timer(0.3, signal.raise_signal, args=(signal.SIGTERM,))
        timer.start()
        findings, interrupted = walk_off_main_thread(session, Console(stderr=True))  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGTERM, previous)
        _interrupt.count = count
    assert interrupted
    assert findings.note.startswith("interrupted by SIGTERM at node input.data-wait")
    assert "Ctrl-C" not in findings.note


def test_an_interrupt_after_the_walk_ended_says_the_report_is_complete() -> None:
    """Issue 33: a complete walk interrupted at its very end said "partial"."""
    session = BlockingSession()
    session.walk = SimpleNamespace(current=None, finished=True)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_in(0.3)
        findings, interrupted = walk_off_main_thread(session, Console(stderr=True))  # type: ignore[arg-type]
    finally:
        signal.signal(signal.SIGINT, previous)
    assert interrupted and "the report is complete" in findings.note and "partial" not in findings.note
