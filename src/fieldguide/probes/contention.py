"""How contended the CPUs were during a measurement window: the machine's load, steal, and how
long the job's threads (and fieldguide's own) sat runnable waiting for a core.

Read from /proc at the window's start and end (a few hundred small files at most, no
sampling thread): `/proc/stat` for the machine's busy and steal time, `/proc/loadavg`, and
each thread's `/proc/PID/task/TID/schedstat` (time on a CPU, time waiting on a run queue).
A share of time read on a box where the job waits for a core is a share of a stretched step:
the engine widens its margins by this reading (see `margin_factor`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

# A job with a thread that waited for a core this share of the window, or a machine that lost
# this share to its hypervisor, was oversubscribed during the window.
OVERSUBSCRIBED_WAIT = 0.10
OVERSUBSCRIBED_STEAL = 0.10
# A shorter window reads /proc/stat's 10 ms ticks too coarsely to say anything (an env check).
MIN_WINDOW_S = 0.5

# The names a window adds to a measurement's values, with their units.
VALUES = {
    "cpu_wait_fraction": "fraction",       # the job's most-waiting thread: run-queue wait / wall time
    "self_cpu_wait_fraction": "fraction",  # fieldguide's and its samplers' most-waiting thread
    "box_busy_fraction": "fraction",
    "steal_fraction": "fraction",
    "load_per_core": "",
    "free_cores": "",
}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except OSError:
        return None


def _cpu_times() -> tuple[int, int, int] | None:
    """(total, idle incl. iowait, steal) jiffies from /proc/stat's first line."""
    text = _read("/proc/stat")
    if not text:
        return None
    fields = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest is inside user.
    total = sum(fields[:8])
    return total, fields[3] + (fields[4] if len(fields) > 4 else 0), fields[7] if len(fields) > 7 else 0


def _tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return []


def _schedstat(pids: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(pid, tid) -> (ns on a CPU, ns waiting on a run queue) for every thread of `pids`."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{pid}/task/{tid}/schedstat")
            if text:
                parts = text.split()
                if len(parts) >= 2:
                    found[(pid, int(tid))] = (int(parts[0]), int(parts[1]))
    return found


def _wait_share(before: dict[tuple[int, int], tuple[int, int]],
                after: dict[tuple[int, int], tuple[int, int]], wall_ns: float) -> float | None:
    """The largest share of the window's wall time any one thread spent runnable but waiting
    for a core (threads present at both ends). Per wall time, not per runnable time: a thread
    that mostly sleeps waits a little after each wake-up even on an idle machine, which is a
    large share of its few microseconds on a CPU and none of the step."""
    shares = [max(after[key][1] - wait0, 0) / wall_ns for key, (_, wait0) in before.items() if key in after]
    return min(max(shares), 1.0) if shares and wall_ns > 0 else None


def box_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy (all cores, steal left out), from /proc/stat."""
    times = _cpu_times()
    if times is None:
        return None
    total, idle, steal = times
    return (total - idle - steal) / (os.sysconf("SC_CLK_TCK") or 100)


def tree_cpu(pids: list[int]) -> dict[tuple[int, int], int]:
    """(pid, tid) -> ns on a CPU, for every thread of these processes and their descendants."""
    tree = sorted({p for pid in pids for p in _tree(pid)})
    return {key: on_cpu for key, (on_cpu, _) in _schedstat(tree).items()}


def cpu_seconds_between(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> float:
    """CPU seconds the threads present at both readings used between them (a worker born or
    ended inside the window is left out, not counted with its whole life)."""
    return sum(max(after[key] - ns, 0) for key, ns in before.items() if key in after) / 1e9


def foreign_share(job_s: float, box_before: float | None, box_after: float | None) -> float | None:
    """Of the CPU time the machine was busy in a window, the share that was not the job's
    (`job_s` CPU seconds: other users' processes, fieldguide's samplers): the part of a job
    thread's run-queue wait spent behind them, not behind the job's own threads. None where
    /proc/stat was not read."""
    if box_before is None or box_after is None or box_after <= box_before:
        return None
    return min(max(1.0 - job_s / (box_after - box_before), 0.0), 1.0)


@dataclass
class _Snapshot:
    cpu: tuple[int, int, int] | None
    job: dict[tuple[int, int], tuple[int, int]]
    own: dict[tuple[int, int], tuple[int, int]]


class ContentionWindow:
    """Start it when a measurement window opens, `finish()` it when it closes."""

    def __init__(self, job_pid: int | None):
        self._job_pids = _tree(job_pid) if job_pid else []
        own = os.getpid()
        self._own_pids = [p for p in _tree(own) if p not in self._job_pids]
        self._opened = time.monotonic()
        self._start = self._snapshot()

    def _snapshot(self) -> _Snapshot:
        return _Snapshot(cpu=_cpu_times(), job=_schedstat(self._job_pids), own=_schedstat(self._own_pids))

    def finish(self) -> dict[str, Any]:
        """The window's readings (a name is absent where /proc could not tell; none at all for a
        window too short to read)."""
        if time.monotonic() - self._opened < MIN_WINDOW_S:
            return {}
        end = self._snapshot()
        found: dict[str, Any] = {}
        if self._start.cpu and end.cpu and end.cpu[0] > self._start.cpu[0]:
            total = end.cpu[0] - self._start.cpu[0]
            found["box_busy_fraction"] = round(1 - (end.cpu[1] - self._start.cpu[1]) / total, 3)
            found["steal_fraction"] = round((end.cpu[2] - self._start.cpu[2]) / total, 3)
        cores = psutil.cpu_count() or 1
        loadavg = _read("/proc/loadavg")
        if loadavg:
            found["load_per_core"] = round(float(loadavg.split()[0]) / cores, 2)
        if "box_busy_fraction" in found:
            found["free_cores"] = round(cores * (1 - found["box_busy_fraction"]), 1)
        wall_ns = (time.monotonic() - self._opened) * 1e9
        for name, before, after in (("cpu_wait_fraction", self._start.job, end.job),
                                    ("self_cpu_wait_fraction", self._start.own, end.own)):
            share = _wait_share(before, after, wall_ns)
            if share is not None:
                found[name] = round(share, 3)
        return found


def oversubscribed(reading: dict[str, Any]) -> bool:
    """Whether the window's job waited for cores (or the machine lost time to steal)."""
    return (reading.get("cpu_wait_fraction") or 0) >= OVERSUBSCRIBED_WAIT \
        or (reading.get("steal_fraction") or 0) >= OVERSUBSCRIBED_STEAL


def margin_factor(reading: dict[str, Any]) -> float:
    """How much wider a share-of-time reading's uncertainty is on this window's machine: 1 when
    the job had its cores, up to 2 as its threads waited for them.

    The spread a margin comes from already grows with contention (a delayed sampler takes fewer
    samples; stretched steps spread more). What it does not hold is the bias of a sampler
    running below the job: it gets a core more readily while the job's threads sleep, so it can
    over-count waiting by as much as the job waited for cores. Tripling every margin at a third
    of the window in the run queue (as before) made a loop waiting 22% of its step against a 10%
    threshold 'too close to call'."""
    wait = max(reading.get("cpu_wait_fraction") or 0.0, reading.get("steal_fraction") or 0.0)
    return 1.0 + min(1.0, wait)


def summarize(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The walk's windows together: how many, how many oversubscribed, the worst of each reading."""
    read = [w for w in windows if w]
    found: dict[str, Any] = {"windows": len(read), "oversubscribed_windows": sum(oversubscribed(w) for w in read)}
    for name in ("cpu_wait_fraction", "self_cpu_wait_fraction", "steal_fraction", "load_per_core",
                 "box_busy_fraction"):
        seen = [w[name] for w in read if isinstance(w.get(name), (int, float))]
        if seen:
            found[f"{name}_max"] = max(seen)
    return found


def describe(summary: dict[str, Any]) -> str:
    """A sentence for the report's note when the machine was oversubscribed, else ""."""
    busy, total = summary.get("oversubscribed_windows") or 0, summary.get("windows") or 0
    if not busy:
        return ""
    said = [f"the machine was oversubscribed in {busy} of {total} measurement windows"]
    wait, steal, load = (summary.get(f"{n}_max") for n in ("cpu_wait_fraction", "steal_fraction", "load_per_core"))
    if wait:
        said.append(f"a thread of the job waited up to {wait:.0%} of a window for a core")
    if steal:
        said.append(f"steal up to {steal:.0%}")
    if load:
        said.append(f"load up to {load:.2g} per core")
    return ", ".join(said) + ": readings close to a threshold were measured longer or not judged"


def main_thread_times(pid: int) -> tuple[float, float | None] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process's main thread, from
    /proc/PID/task/PID/schedstat; without schedstat, psutil's CPU time and no run-queue time."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            on_cpu_ns, queued_ns, _ = f.read().split()
        return int(on_cpu_ns) / 1e9, int(queued_ns) / 1e9
    except (OSError, ValueError):
        cpu = main_thread_cpu(pid)
        return None if cpu is None else (cpu, None)


def off_cpu_shares(before: tuple[float, float | None] | None, after: tuple[float, float | None] | None,
                   wall: float) -> tuple[float | None, float | None]:
    """Of `wall` seconds: the share a thread was off the CPU, and the part of it spent runnable,
    waiting for a CPU (the node's cores busy). None where it was not read.

    The wait for the other ranks is judged on the whole time off the CPU: with gloo, the
    communication's own threads take the cores the main thread waits for, so a communication-bound
    job's wait is partly run-queue time (its zoo job read 38% blocked, 61-72% off the CPU). The
    run-queue share is shown beside it: a rank that waits for a CPU on a node whose cores are all
    busy can read as waiting for the others."""
    if before is None or after is None or wall <= 0:
        return None, None
    ran = after[0] - before[0]
    queued = after[1] - before[1] if after[1] is not None and before[1] is not None else None
    off_cpu = 1.0 - ran / wall
    return min(max(off_cpu, 0.0), 1.0), None if queued is None else min(max(queued / wall, 0.0), 1.0)


def main_thread_cpu(pid: int) -> float | None:
    """CPU seconds of a process's main thread (its thread id is its pid), from /proc via psutil."""
    import psutil

    try:
        for thread in psutil.Process(pid).threads():
            if thread.id == pid:
                return float(thread.user_time + thread.system_time)
    except psutil.Error:
        return None
    return None
