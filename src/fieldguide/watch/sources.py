"""Where the watch's series come from, at a cost to the job of next to nothing.

Launched: the agent's step stream (each step's time, and the part of it before the first
forward: input) and its resident set once a second; nothing is armed. The achieved rate (GFLOP/s:
the FLOPs of one step, counted by the agent every COUNT_EVERY_S, over each step's time), so that a
job that falls to a slower path shows its rate falling. Attached: the resident
set through psutil, and the input share from a sparse stack sample: a 4 s py-spy window at 10
samples a second every 8 s, of the main process only, non-blocking (the job is never paused).
On a GPU, NVML's utilisation, GPM's SM activity and the job's own device memory, in both modes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.agent.inside.rows import RssRow, StepRow
from fieldguide.watch.detect import MIN_POLLED, Point, SeriesShape

MB = 2**20
STACK_WINDOW_S = 4.0  # attached: each sparse stack window
STACK_EVERY_S = 8.0  # one window begins this often (half the time sampled)
STACK_RATE = 10  # samples a second in it (py-spy's default is 100)
COUNT_EVERY_S = 60.0  # a FLOP count (one step under a dispatch mode) this often: a step's cost a minute


@dataclass
class Polled:
    """New points since the last poll, by series; each rank's steps; and what a series lacks here."""

    points: dict[str, list[Point]] = field(default_factory=dict)
    ranks: dict[int, list[Point]] = field(default_factory=dict)
    steps_total: int = 0

    def add(self, series: str, t: float, value: float) -> None:
        self.points.setdefault(series, []).append((t, value))


@dataclass
class GpuReading:
    util: float | None = None  # NVML utilisation of the job's GPUs (%), their mean
    memory_mb: float | None = None  # what the job's processes hold on them
    sm_active: float | None = None  # GPM's SM activity since the last read (%), where the part has GPM


class GpuReader:
    """The job's GPUs through NVML: utilisation of the devices it holds, GPM's SM activity on
    them, and the memory its processes hold there. None (and why, once) where there is no NVML
    or no GPU; SM activity's reason separately (a part without GPM)."""

    def __init__(self, pids: Callable[[], set[int]], module: Any | None = None) -> None:
        self.pids = pids
        self.module = module
        self.nvml: Any = None
        self.reason: str | None = None
        self.sm_reason: str | None = None
        self.idle_reason: str | None = None  # NVML works, and the job holds no GPU (yet)
        self.gpm: dict[int, Any] = {}  # device -> the GPM sample begun at the last read
        self.memory_on_gpu = False  # once the job holds device memory, its memory series stays that

    def read(self) -> GpuReading:
        if self.reason is not None:
            return GpuReading()
        from fieldguide.host.nvml import Nvml, NvmlUnavailable, error_text

        if self.nvml is None:
            try:
                self.nvml = Nvml.open(self.module)
            except NvmlUnavailable as err:
                self.reason = str(err)
                return GpuReading()
        try:
            return self._read(self.pids())
        except Exception as failure:  # a GPU lost (Xid 79), hidden, or the driver reloaded: said, not raised
            self.reason = f"NVML stopped answering: {error_text(failure)}"
            self.close()
            return GpuReading()

    def _read(self, pids: set[int]) -> GpuReading:
        utils, sms, used = [], [], 0
        for index in range(self.nvml.count()):
            held = self.nvml.compute_pids(index)
            mine = pids & set(held)
            if not mine:
                continue
            used += sum(held[p] or 0 for p in mine)
            util = self.nvml.read("nvmlDeviceGetUtilizationRates", self.nvml.handle(index))
            if util.ok:
                utils.append(float(util.value.gpu))
            begun = self.gpm.get(index)
            if begun is not None:
                metrics = self.nvml.gpm_end(begun)
                if metrics.ok and metrics.value.get("sm_active") is not None:
                    sms.append(float(metrics.value["sm_active"]))
                elif not metrics.ok:
                    self.sm_reason = metrics.reason
            self.gpm[index] = self.nvml.gpm_begin(index)
            if not self.gpm[index].ok:
                self.sm_reason = self.gpm[index].reason
        self.idle_reason = None if utils or used else "the job's processes hold no GPU (NVML lists none of them)"
        return GpuReading(util=sum(utils) / len(utils) if utils else None, memory_mb=used / MB if used else None,
                          sm_active=sum(sms) / len(sms) if sms else None)

    def missing(self) -> dict[str, str]:
        why = self.reason or self.idle_reason
        if why:
            return {"gpu_util": why, "sm_active": why}
        return {"sm_active": self.sm_reason} if self.sm_reason else {}

    def add_to(self, polled: Polled, now: float, memory: bool) -> bool:
        """This read's points; whether the job's memory was read here (its device memory)."""
        reading = self.read()
        if reading.util is not None:
            polled.add("gpu_util", now, reading.util)
        if reading.sm_active is not None:
            polled.add("sm_active", now, reading.sm_active)
        if memory and reading.memory_mb is not None:
            self.memory_on_gpu = True
            polled.add("memory_mb", now, reading.memory_mb)
        # Never a resident set in a series of device memory: one poll without the GPU's answer is skipped.
        return self.memory_on_gpu

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None


class FlopCounts:
    """The agent's count of one step's FLOPs, asked on a thread every COUNT_EVERY_S while not held
    (a walk of the watch's counts its own): the latest GFLOP a step, or why there is none."""

    def __init__(self, target: Any) -> None:
        self.target = target
        self.gflop: float | None = None
        self.reason: str | None = None  # why there is no count (None before the first answer)
        self.asked_at: float | None = None
        self.held = False
        self.thread: threading.Thread | None = None

    def maybe_ask(self, now: float) -> None:
        if self.held or (self.thread is not None and self.thread.is_alive()):
            return
        if self.asked_at is not None and now - self.asked_at < COUNT_EVERY_S:
            return
        self.asked_at = now
        self.thread = threading.Thread(target=self._ask, name="fieldguide-watch-flops", daemon=True)
        self.thread.start()

    def _ask(self) -> None:
        agent = self.target.agent
        if agent is None:
            return
        reply = agent.request("efficiency", {"count": True, "timeout_s": 10.0}, timeout=12.0)
        if not reply.ok:
            self.reason = f"the agent did not count a step's FLOPs: {reply.error}"
            return
        total = sum(float(v) for v in (reply.result.get("flops") or {}).values())
        if total > 0:
            self.gflop, self.reason = total / 1e9, None
        else:
            self.reason = "no op of the step has a FLOP formula in torch"


def job_pids(pid: int | None) -> set[int]:
    """The process and its descendants (a launcher's ranks, DataLoader workers)."""
    if pid is None:
        return set()
    import psutil

    try:
        proc = psutil.Process(pid)
        return {pid, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return set()


class LaunchSource:
    """A launched job's agent streams: the primary rank's steps and resident set, every rank's steps."""

    kind = "launch"
    shape = SeriesShape(per_step=("step_ms", "input_share", "gflops"))

    def __init__(self, target: Any, gpu_module: Any | None = None) -> None:
        self.target = target
        # (connection id, stream) -> (the connection, items taken): the connection is kept, so its id is not reused
        self.seen: dict[tuple[int, str], tuple[Any, int]] = {}
        self.main: Any = None
        # The whole job's processes, from the launched process down (a launcher's ranks included).
        self.gpu = GpuReader(lambda: job_pids(target.popen.pid), gpu_module)
        self.gpu.read()  # NVML opened now: what it cannot measure is in the start event
        self.flops = FlopCounts(target)

    def hold(self, holding: bool) -> None:
        """No FLOP count of the watch's own while a walk of the job measures."""
        self.flops.held = holding

    def _new(self, conn: Any, capability: str, name: str) -> list[Any]:
        key = (id(conn), f"{capability}.{name}")
        kept, taken = self.seen.get(key, (conn, 0))
        snapshot: tuple[int, list[Any]] = self.target.agent.snapshot(conn, capability, name,
                                                                     since=taken if kept is conn else 0)
        self.seen[key] = (conn, snapshot[0])
        return snapshot[1]

    def job_alive(self) -> bool:
        """The launched process (torchrun, a wrapper script): its ranks end before it does."""
        return self.target.popen.poll() is None

    def poll(self, now: float) -> Polled:
        polled = Polled()
        agent = self.target.agent
        if agent is None:
            return polled
        # One process's steps make the series: the first to train, kept while it is connected (a
        # walk's `prefer` of the slowest rank must not switch the series mid-session). A launcher
        # (torchrun) has an agent too, and never a step: it is not kept.
        if self.main is None or self.main.closed or not self.main.steps_total:
            self.main = agent.primary()
        primary = self.main
        if primary is None:
            return polled
        polled.steps_total = primary.steps_total
        if primary.steps_total:
            self.flops.maybe_ask(now)
        gflop = self.flops.gflop
        ranks = agent.ranks()
        for conn in ranks if primary in ranks else [primary, *ranks]:
            rows = [StepRow.read(r) for r in self._new(conn, "loop", "steps")]
            if conn.rank is not None:
                polled.ranks.setdefault(conn.rank, []).extend((r.t_end, r.wall_s * 1000) for r in rows)
            if conn is not primary:
                continue
            for r in rows:
                if r.wall_s <= 0:
                    continue
                polled.add("step_ms", r.t_end, r.wall_s * 1000)
                before_forward = r.input_s if r.input_s is not None else r.loader_wait_s
                polled.add("input_share", r.t_end, min(max(before_forward / r.wall_s, 0.0), 1.0))
                if gflop is not None:
                    polled.add("gflops", r.t_end, gflop / r.wall_s)
        rss = [RssRow.read(r) for r in self._new(primary, "memory", "rss")]
        if not self.gpu.add_to(polled, now, memory=True):  # a CUDA job's memory is its device memory
            for row in rss:
                polled.add("memory_mb", row.t, row.rss / MB)
        return polled

    def missing(self) -> dict[str, str]:
        missing = self.gpu.missing()
        if self.flops.gflop is None and self.flops.reason:
            missing["gflops"] = self.flops.reason
        return missing

    def close(self) -> None:
        self.gpu.close()


class AttachSource:
    """A running process seen from outside: psutil's resident set each poll, and the input share
    of each sparse stack window (a thread runs them one after another)."""

    kind = "attach"
    # No step is timed from outside; the input share comes once per stack window (a point every
    # STACK_EVERY_S or a little more: the window holds at least MIN_POLLED of them).
    shape = SeriesShape(per_step=(), windows={"input_share": (MIN_POLLED + 1) * STACK_EVERY_S}, gated_by=None)

    def __init__(self, target: Any, gpu_module: Any | None = None, stacks: bool = True) -> None:
        from fieldguide.host.access import py_spy_path

        self.target = target
        self.gpu = GpuReader(lambda: job_pids(target.pid), gpu_module)
        self.gpu.read()  # NVML opened now: what it cannot measure is in the start event
        self.spy = py_spy_path()
        self._stack_points: list[Point] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.stack_reason: str | None = None if self.spy else "py-spy is not installed: no stack samples"
        self._thread: threading.Thread | None = None
        if stacks and self.spy:
            self._thread = threading.Thread(target=self._stack_windows, name="fieldguide-watch-stacks", daemon=True)
            self._thread.start()

    def _stack_windows(self) -> None:
        """A window every STACK_EVERY_S until closed or the job ends; a failed one is said and retried."""
        while not self._stop.is_set() and self.target.alive():
            started = time.monotonic()
            try:
                self._one_window()
            except Exception as failure:  # a full /tmp, no more processes: said, and tried again
                self.stack_reason = f"a stack window failed: {type(failure).__name__}: {failure}"
            self._stop.wait(max(STACK_EVERY_S - (time.monotonic() - started), 0.5))

    def _one_window(self) -> None:
        from fieldguide.probes.stack_recording import record_stacks
        from fieldguide.probes.stacks import read_samples, stack_values

        assert self.spy is not None
        # The main process only: its share waiting for or making its batch is what is watched.
        texts, errors, _ = record_stacks(self.spy, self.target.pid, STACK_WINDOW_S, STACK_RATE,
                                         cancelled_wait=self._stop.wait, subprocesses=False)
        ended = time.monotonic()
        if not texts.get("all"):
            said = (errors.get("all") or "").strip().splitlines()
            self.stack_reason = f"py-spy wrote no samples{': ' + said[-1] if said else ''}"
            return
        self.stack_reason = None
        all_samples, active = read_samples(texts, self.target.pid)
        values, _ = stack_values(all_samples, active)
        share = values.get("data_wait_fraction")  # the main thread waiting for, or making, its batch
        if share is not None:
            with self._lock:
                self._stack_points.append((ended, float(share)))

    def poll(self, now: float) -> Polled:
        import psutil

        polled = Polled()
        with self._lock:
            for t, v in self._stack_points:
                polled.add("input_share", t, v)
            self._stack_points.clear()
        if not self.gpu.add_to(polled, now, memory=True):  # a CUDA job's memory is its device memory
            try:
                polled.add("memory_mb", now, psutil.Process(self.target.pid).memory_info().rss / MB)
            except psutil.Error:
                pass
        return polled

    def job_alive(self) -> bool:
        return bool(self.target.alive())

    def hold(self, holding: bool) -> None:
        """Nothing to hold: attached, the watch counts no FLOPs."""

    def missing(self) -> dict[str, str]:
        missing = {"step_ms": "attached: steps are timed by the agent of a launched job (watch -- CMD)",
                   "gflops": "attached: a step's FLOPs are counted by the agent of a launched job (watch -- CMD)",
                   **self.gpu.missing()}
        if self.stack_reason:
            missing["input_share"] = self.stack_reason
        return missing

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STACK_EVERY_S + 5)
        self.gpu.close()
