"""Ending a process fieldguide's tests and benchmarks started themselves, with all it started.

torchrun starts each rank in a session of its own: SIGKILL to the launcher's process group leaves
the ranks running, re-parented, for the rest of their job. (A job fieldguide launches for a walk is
ended by targets/launch.py, SIGINT first and the ranks' token after.)"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def kill_tree(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGKILL to `proc`'s process group and to every process below it, then reap them."""
    import psutil

    try:
        below = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        below = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in below:
        try:
            child.kill()
        except psutil.Error:
            pass
    proc.wait()
    psutil.wait_procs(below, timeout=timeout)
