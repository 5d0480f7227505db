"""A launch whose set-up fails leaves nothing behind: no socket, no thread, no private directory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fieldguide.errors import TargetFailed
from fieldguide.targets import LaunchTarget


def agent_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fieldguide-agent")]


def test_a_command_that_cannot_start_leaves_no_socket_thread_or_directory(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR

    def refuse(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        raise PermissionError(13, "Permission denied")

    before = set(agent_threads())
    monkeypatch.setattr(subprocess, "Popen", refuse)
    with pytest.raises(TargetFailed, match="cannot start"):
        LaunchTarget([sys.executable, "-c", "pass"])
    assert list(tmp_path.iterdir()) == []  # the private directory, with its socket, is gone
    for thread in set(agent_threads()) - before:
        thread.join(timeout=3)
        assert not thread.is_alive(), f"{thread.name} still running"


def test_a_bootstrap_that_cannot_be_written_closes_the_channel_and_removes_the_directory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    from fieldguide.targets import launch as targets

    monkeypatch.setattr(tempfile, "tempdir", None)

    def disk_full(directory: Path) -> Path:
        raise OSError(28, "No space left on device")

    before = set(agent_threads())
    monkeypatch.setattr(targets, "write_bootstrap", disk_full)
    with pytest.raises(TargetFailed, match="No space left on device"):
        LaunchTarget([sys.executable, "-c", "pass"])
    assert list(tmp_path.iterdir()) == []
    for thread in set(agent_threads()) - before:
        thread.join(timeout=3)
        assert not thread.is_alive(), f"{thread.name} still running"


def test_a_socket_path_too_long_is_a_one_line_failure_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    deep.mkdir()
    monkeypatch.setenv("TMPDIR", str(deep))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(TargetFailed, match="cannot open the agent channel"):
        LaunchTarget([sys.executable, "-c", "pass"])
    assert list(deep.iterdir()) == []


def test_an_interrupt_while_the_job_starts_leaves_no_job_running(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    import psutil

    from fieldguide.targets import launch as targets

    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_interrupted(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        proc = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        started.append(proc)
        return proc

    class InterruptedThread(threading.Thread):
        def start(self) -> None:
            if self.name == "fieldguide-target-output":  # the next thing after the job is spawned: Ctrl-C lands here
                raise KeyboardInterrupt
            super().start()

    monkeypatch.setattr(targets.subprocess, "Popen", popen_then_interrupted)
    monkeypatch.setattr(targets.threading, "Thread", InterruptedThread)
    with pytest.raises(KeyboardInterrupt):
        LaunchTarget([sys.executable, "-c", "import time; time.sleep(60)"])
    jobs = [p for p in started if "watchdog.py" not in str(p.args)]
    assert len(jobs) == 1
    deadline = time.monotonic() + 5
    while psutil.pid_exists(jobs[0].pid) and jobs[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jobs[0].poll() is not None, "the job was left running"
    assert all(p.poll() is not None for p in started), "the watchdog was left running"


def ending_signals_blocked(pid: int) -> set[int]:
    """The ending signals a process has blocked, from its SigBlk mask in /proc."""
    import signal

    mask = next(int(line.split()[1], 16) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("SigBlk:"))
    return {sig for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if mask >> (sig - 1) & 1}


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc")
def test_the_launched_job_can_be_interrupted_and_ends_on_sigint() -> None:
    """Holding Ctrl-C while the job starts must not hand the job a mask that blocks it: a job
    that inherits one ignores SIGINT and SIGTERM and is only ended by SIGKILL."""
    import time

    target = LaunchTarget([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        assert ending_signals_blocked(target.pid) == set()
        started = time.monotonic()
        target.close()
        assert target.popen.returncode not in (None, -9), target.popen.returncode  # SIGINT ended it
        assert time.monotonic() - started < 2.5
    finally:
        target.close()


def test_a_signal_held_while_a_job_starts_reaches_its_handler_after() -> None:
    import signal

    from fieldguide.targets import ending_signals_held

    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with ending_signals_held():
            signal.raise_signal(signal.SIGTERM)
            assert got == []
        assert got == [signal.SIGTERM]
        assert ending_signals_blocked(os.getpid()) == set()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_job_printing_megabytes_without_a_newline_keeps_one_cut_line() -> None:
    """Issue 33: 2 MB a step with no newline was kept and redacted whole (37 CPU-seconds)."""
    import collections
    import io
    import time
    from types import SimpleNamespace

    from fieldguide.targets.launch import MAX_LINE_BYTES, LaunchTarget

    target = object.__new__(LaunchTarget)
    target._log = collections.deque(maxlen=200)  # type: ignore[attr-defined]
    target._echo = None  # type: ignore[attr-defined]
    target.popen = SimpleNamespace(stdout=io.BytesIO(b"x" * 2_000_000 + b"\nstep 1 loss 2.0\n" + b"y" * 10))  # type: ignore[assignment]
    started = time.process_time()
    target._read_output()
    assert time.process_time() - started < 1.0
    tail = target.log_tail()
    assert tail[0] == "x" * MAX_LINE_BYTES + " …" and tail[1:] == ["step 1 loss 2.0", "y" * 10]
