"""fieldguide's own sampler processes (py-spy): started below the job's priority, and reaped
with their CPU seconds counted as fieldguide's.

`os.times().children_*` would count every child fieldguide reaps, the launched job and its
try-fix relaunches included: a launched walk's `self_cpu_s` would be the job's CPU. So each
sampler is reaped here with `wait4`, whose rusage is that one process's, and added up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence

# fieldguide's samplers yield the CPU to the job: nice +10 weighs them a tenth of the job's
# threads. Not SCHED_IDLE: on a machine whose cores the job fills, an idle-class sampler would
# run only when a job thread blocks, and its samples would over-count the job's waiting.
SAMPLER_NICE = 10
_POLL_S = 0.02

_lock = threading.Lock()
_reaped_cpu_s = 0.0


def lower_priority(pid: int) -> None:
    """Give a sampler fieldguide started (py-spy) a lower priority than the job; where that is
    not allowed, it runs as it is."""
    try:
        current = os.getpriority(os.PRIO_PROCESS, pid)
        os.setpriority(os.PRIO_PROCESS, pid, min(19, max(current, 0) + SAMPLER_NICE))
    except OSError:
        pass


def samplers_cpu_seconds() -> float:
    """CPU seconds of every sampler reaped so far in this process."""
    with _lock:
        return _reaped_cpu_s


def own_cpu_seconds() -> float:
    """CPU seconds fieldguide has used: its own threads and the samplers it reaped, not the job."""
    times = os.times()
    return times.user + times.system + samplers_cpu_seconds()


def reap(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> int | None:
    """A sampler's exit status once it has exited (reaped, its CPU counted); None while it runs."""
    global _reaped_cpu_s
    if proc.returncode is not None:
        return proc.returncode
    try:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:  # reaped elsewhere: Popen knows its status, or says 0
        return proc.poll()
    if pid == 0:
        return None
    with _lock:
        _reaped_cpu_s += usage.ru_utime + usage.ru_stime
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode


def wait(proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float) -> int | None:
    """`reap` until the sampler exits or `timeout` passes (None then: it still runs)."""
    deadline = time.monotonic() + timeout
    while True:
        code = reap(proc)
        if code is not None or time.monotonic() >= deadline:
            return code
        time.sleep(_POLL_S)


def stop(procs: Iterable[subprocess.Popen[str]], grace: float) -> None:
    """End and reap every sampler still running: SIGINT (py-spy writes what it has), then SIGKILL."""
    running = [p for p in procs if reap(p) is None]
    for p in running:
        try:
            p.send_signal(signal.SIGINT)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    for p in running:
        if wait(p, max(0.0, deadline - time.monotonic())) is None:
            p.kill()
            wait(p, 5.0)


def run(cmd: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` for a short sampler (a py-spy dump): lowered, its output captured in files
    (no pipe to fill), reaped with its CPU counted. TimeoutExpired past `timeout`, killed."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, text=True, env=env)
        lower_priority(proc.pid)
        code = wait(proc, timeout)
        if code is None:
            proc.kill()
            wait(proc, 5.0)
            raise subprocess.TimeoutExpired(list(cmd), timeout)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(list(cmd), code, out.read(), err.read())
