"""Nothing left behind when fieldguide itself dies: the launched job's whole tree, its temp dirs.

A launched job is fieldguide's to end. A SIGKILLed (or OOM-killed) fieldguide cannot end it, so
each launch starts a small watchdog process first. It holds the read end of a pipe whose write
end only fieldguide has; end of file without a "done" line means fieldguide is gone, and the
watchdog ends the job's session, every process that carries the job's mark, and removes the
job's directory. Its own session: a Ctrl-C or a closed terminal meant for fieldguide does not
reach it.

The job's processes are found by a mark in their environment (FIELDGUIDE_OWNER=<random token>),
inherited by every descendant: one that left the job's process group or session (setsid, a
double fork, a daemon) still carries it. A process that clears its own environment does not.

Directories fieldguide makes carry an owner file (pid and start time); a run removes the ones
whose owner is dead (`sweep_leftovers`): what a watchdog killed with its fieldguide could not do.

Standard library only: the watchdog runs this file as a script (`python -I watchdog.py`),
without importing fieldguide.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OWNER_ENV = "FIELDGUIDE_OWNER"
OWNER_FILE = ".fieldguide-owner"
DIR_PREFIX = "fieldguide-"
DONE = b"done\n"
# The job's escalation, as LaunchTarget.close does it: its own cleanup first (KeyboardInterrupt).
ESCALATION = ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0))


def new_token() -> str:
    return secrets.token_hex(16)


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat): a pid and its start
    time name one process, where a pid alone may be reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def claim(directory: Path) -> None:
    """Mark `directory` as this process's, for `sweep_leftovers`."""
    with contextlib.suppress(OSError):
        (directory / OWNER_FILE).write_text(f"{os.getpid()} {_start_time(os.getpid()) or '?'}\n")


def _owner_alive(directory: Path) -> bool:
    try:
        pid_text, started = (directory / OWNER_FILE).read_text().split()
    except (OSError, ValueError):
        return True  # not ours to judge: no owner file, or one being written
    if not pid_text.isdigit():
        return True
    return _start_time(int(pid_text)) == started


def sweep_leftovers(root: Path | None = None) -> list[Path]:
    """Remove this user's fieldguide directories whose owner process is dead. Returns them."""
    root = Path(root or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(DIR_PREFIX):
            continue
        try:
            st = entry.lstat()
        except OSError:
            continue
        # Only a real directory of ours, never through a link another user planted.
        if not (entry.is_dir() and not entry.is_symlink() and st.st_uid == os.geteuid()):
            continue
        if not _owner_alive(entry):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def marked_processes(token: str) -> list[int]:
    """Pids of the processes whose environment carries the mark `token` (never this process)."""
    needle = f"{OWNER_ENV}={token}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def end_marked(token: str, grace: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL after `grace`, to every process carrying the mark. Returns their pids."""
    pids = marked_processes(token)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(_alive(p) for p in pids):
            break
    return pids


def end_session(pgid: int) -> None:
    """The job's process group: SIGINT, SIGTERM, SIGKILL, each given its time."""
    for sig, wait in ESCALATION:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


class Watchdog:
    """fieldguide's side: start before the job, `guard(pgid)` once it runs, `release()` once
    fieldguide has ended the job itself."""

    def __init__(self, token: str, directory: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-I", __file__, token, str(directory)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def guard(self, pgid: int) -> None:
        self._write(f"{pgid}\n".encode())

    def release(self) -> None:
        """The job is ended: the watchdog leaves without touching anything."""
        self._write(DONE)
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()


def main(argv: list[str]) -> int:
    token, directory = argv[0], Path(argv[1])
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    seen = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        seen += chunk
        if seen.endswith(DONE):
            return 0
    # fieldguide is gone without ending its job.
    pgids = [int(line) for line in seen.split() if line.isdigit()]
    for pgid in pgids:
        end_session(pgid)
    end_marked(token)
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
