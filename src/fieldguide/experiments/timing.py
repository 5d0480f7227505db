"""`fieldguide timing`: the performance book's timing table, measured on the user's own loop.

What a naive timer (`time.perf_counter()` around the loop, no synchronize) reports over the
first 20, 100 and 400 steps, what is still queued on the device when it finally syncs, the
synchronized median of warm steps, and the first step ever. Host times come from the agent's
step boundaries and its first-forward mark; device times from CUDA events (the `cuda`
capability's `device_time`). A job that never initialised CUDA has no device queue: each CPU op
returns when its work is done, so the host's clock is the real time, and the table says so.

The table is built by pure functions from a `Timing`, so it is tested on constructed data; the
launching part (`measure`) only collects one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from fieldguide.analysis.coldstart import steady_step, step_signal
from fieldguide.analysis.stats import median, quantile
from fieldguide.errors import EXIT_CLEAN, BadInput, TargetFailed
from fieldguide.probes.loop import step_rows

WINDOWS = (20, 100, 400)
NO_CUDA = "has not initialised CUDA"
NO_QUEUE = "Each CPU op returns when its work is done, so host time is the real time"
NAIVE = ("Naive timer: time.perf_counter() from the first forward to the end of step N, over N, no "
         "synchronize")
WARM = "Warm steps: a window after warm-up; synced adds what the queue grew by over it"
WIDTH = 80


@dataclass(frozen=True)
class DeviceWindow:
    """One `device_time` reply: a window of warm steps timed by the host and by CUDA events."""

    steps: int
    host_ms: float  # per step, the host's clock alone: what a naive timer reads
    queued_ms: float  # still queued when the host recorded the window's last event
    device_ms: tuple[float, ...]
    queued_start_ms: float | None = None  # already queued as the window's first event was recorded

    @property
    def synced_ms(self) -> float:
        """Per step, as a timer that synchronizes at both ends reads it: host time, plus what the
        queue grew by. In steady state the host runs a full queue ahead at both ends, so a warm
        window's naive time is already the device's pace (an H200 loop: 1035 ms queued at the end
        and as much at the start; adding the end alone read 108 ms/step against 55.6)."""
        return self.host_ms + (self.queued_ms - (self.queued_start_ms or 0.0)) / self.steps


@dataclass
class Timing:
    ends: list[float]  # host end of each step, in order (monotonic seconds)
    first_forward: float | None  # the first step's start; None when it was not seen
    steps_wanted: int
    short: str = ""  # why fewer steps than wanted were collected ("" when all were)
    device: list[DeviceWindow] = field(default_factory=list)
    no_device: str = ""  # why there is no device time (the CPU path), "" on a GPU
    device_short: str = ""  # why a device window is missing


# -- pure: from the agent's streams -----------------------------------------------------------
def first_forward(marks: Iterable[dict[str, Any]]) -> float | None:
    return next((float(m["t"]) for m in marks if m.get("mark") == "first_forward"), None)


def step_ends(signals: Iterable[dict[str, Any]], rows: Iterable[Sequence[Any]]) -> tuple[list[float], bool]:
    """The end of each step under the signal that defines steps, and whether the first is in.

    The loop stream's rows are intervals between boundaries, and restart when a better signal
    appears (the first backward, then the first optimizer step): that signal's first boundary,
    in `signals`, is the end of the job's first real step."""
    signal = step_signal(signals)
    rows = list(rows)
    if signal is None:
        return [float(r.t_end) for r in step_rows(rows)], False
    kind, start = signal["boundary"], float(signal["t"])
    return [start, *(float(r.t_end) for r in step_rows(rows) if r.boundary == kind and float(r.t_end) > start)], True


def device_window(reply: dict[str, Any]) -> DeviceWindow | None:
    device = tuple(float(v) for v in reply.get("device_ms") or [])
    host = [float(v) for v in reply.get("host_ms") or []]
    if not device or not host:
        return None
    start = reply.get("queued_ms_at_start")
    return DeviceWindow(steps=len(host), host_ms=sum(host) / len(host),
                        queued_ms=float(reply.get("queued_ms_at_end") or 0.0), device_ms=device,
                        queued_start_ms=float(start) if start is not None else None)


# -- pure: the numbers ------------------------------------------------------------------------
def first_step_ms(t: Timing) -> float | None:
    if t.first_forward is None or not t.ends or t.ends[0] <= t.first_forward:
        return None
    return (t.ends[0] - t.first_forward) * 1000


def naive_ms(t: Timing, n: int) -> float | None:
    """Per step, a timer started before the first forward and read after step n, no sync.
    Without the first step's start it starts at the first step's end (one step later)."""
    if t.first_forward is not None and first_step_ms(t) is not None:
        return (t.ends[n - 1] - t.first_forward) * 1000 / n if len(t.ends) >= n else None
    return (t.ends[n] - t.ends[0]) * 1000 / n if len(t.ends) > n else None


def warm_steps(ends: Sequence[float]) -> tuple[int | None, list[float]]:
    """The step where steps settle (None: too few to tell) and the warm step times in ms;
    with too few steps to tell, the later half."""
    durations = [(b - a) * 1000 for a, b in zip(ends, ends[1:], strict=False)]
    steady = steady_step([(i + 1, end) for i, end in enumerate(ends)])
    if steady is None:
        return None, durations[len(durations) // 2:]
    return steady, durations[steady - 2:]  # durations[i] is step i + 2


def spread(values: Sequence[float]) -> tuple[float, float, float] | None:
    mid, lo, hi = median(values), quantile(values, 0.1), quantile(values, 0.9)
    return None if mid is None or lo is None or hi is None else (mid, lo, hi)


def warmed(t: Timing) -> tuple[tuple[float, float, float] | None, str]:
    """The synchronized warmed median with its p10-p90, and where it comes from."""
    if t.device:
        device = max(t.device, key=lambda w: w.steps).device_ms
        return spread(device), f"CUDA events over {len(device)} warm steps"
    ends = t.ends
    steady, times = warm_steps(ends)
    where = f"steps {steady}-{len(ends)}" if steady else f"the later {len(times)} (too few to see warm-up end)"
    return spread(times), f"host clock, {where}"


# -- pure: the table --------------------------------------------------------------------------
def ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def windows(t: Timing) -> list[int]:
    return [*WINDOWS, *([t.steps_wanted] if t.steps_wanted > WINDOWS[-1] else [])]


def missing(t: Timing, n: int) -> str:
    if n > t.steps_wanted:
        return f"not timed: --steps {t.steps_wanted}"
    return f"not reached: {t.short}" if t.short else "not reached"


def rows(t: Timing) -> list[tuple[str, str, str]]:
    """(what, it reads, what it counts or misses), top to bottom."""
    mid = (warmed(t)[0] or (None,))[0]
    first = first_step_ms(t)
    if first is None:
        out = [("first step ever", "-", "not seen: its start came before the agent")]
    else:
        out = [("first step ever", f"{ms(first)} ms",
                f"{first / mid:.{0 if first >= 10 * mid else 1}f}x a warm step" if mid else "")]
    queued = f"; misses ~{ms(t.device[0].queued_ms)} ms queued" if t.device else ""
    for n in windows(t):
        value = naive_ms(t, n)
        if value is None:
            out.append((f"naive timer, first {n} steps", "-", missing(t, n)))
        else:
            out.append((f"naive timer, first {n} steps", f"{ms(value)} ms/step",
                        (f"{value / mid:.2f}x warm" if mid else "") + queued))
    for w in t.device:
        out.append((f"naive timer, {w.steps} warm steps", f"{ms(w.host_ms)} ms/step",
                    f"synced: {ms(w.synced_ms)} ms/step"))
    if t.device:
        last = max(t.device, key=lambda w: w.steps)
        opened = (f"; {ms(last.queued_start_ms)} ms as the window opened"
                  if last.queued_start_ms is not None else "")
        out.append(("still queued at the final sync", f"{ms(last.queued_ms)} ms",
                    f"launched, not yet run, after {last.steps} warm steps{opened}"))
    elif t.no_device:
        out.append(("still queued at the final sync", "0 ms", "no device queue (CPU)"))
    else:
        out.append(("still queued at the final sync", "-", f"not measured: {t.device_short or 'no reply'}"))
    stats, where = warmed(t)
    out.append(("synchronized warmed median", f"{ms(stats[0])} ms/step" if stats else "-",
                f"p10-p90 {ms(stats[1])}-{ms(stats[2])}, {where}" if stats else "too few steps"))
    return out


def warm_up(t: Timing, n: int, naive: float) -> str:
    """What a naive n-step timer counts beyond n warm steps: the first step, or slow steps after it too."""
    stats = warmed(t)[0]
    first = first_step_ms(t)
    steady = warm_steps(t.ends)[0]
    extra = (naive - stats[0]) * n if stats else 0.0
    if first is not None and stats and first - stats[0] >= 0.6 * extra:
        return f"the first step's warm-up ({ms(first)} ms)"
    slow = f"the slower steps before step {steady}" if steady and steady > 2 else "the warm-up steps"
    return f"the first step ({ms(first)} ms) and {slow}" if first is not None else slow


def reading(t: Timing) -> str:
    """One computed sentence: how far the naive timers are from the warmed median, and why."""
    stats = warmed(t)[0]
    reached = [(n, v) for n in windows(t) if (v := naive_ms(t, n)) is not None]
    if stats is None or not reached:
        return "too few steps to compare a naive timer with warm steps"
    mid = stats[0]
    n, value = reached[0]
    ratio = value / mid
    if ratio >= 1.1:
        parts = [f"the naive {n}-step timer reads {ratio:.1f}x the warmed median: it includes {warm_up(t, n, value)}"]
    elif ratio <= 0.9:
        why = ("the host ran ahead of the device, and what it queued is not in it" if t.device else
               "the early steps ran faster than the later ones (a busier machine, or steps that grow)")
        parts = [f"the naive {n}-step timer reads {ratio:.2f}x the warmed median: {why}"]
    else:
        parts = [f"the naive {n}-step timer reads within {abs(ratio - 1) * 100:.0f}% of the warmed median"]
    if len(reached) > 1:
        big, big_value = reached[-1]
        parts.append(f"over {big} steps it reads {big_value / mid:.2f}x")
    if t.device:
        w = t.device[0]
        grew = w.queued_ms - (w.queued_start_ms or 0.0)
        share = grew / (w.host_ms * w.steps + grew) if w.host_ms * w.steps + grew > 0 else 0.0
        if w.queued_start_ms is not None and abs(share) < 0.05:
            parts.append(f"warm, the host runs {ms(w.queued_ms)} ms of queued work ahead of the device at both "
                         f"ends of {w.steps} steps, so a naive timer over warm steps keeps the device's pace; "
                         "it misleads while that queue fills")
        else:
            parts.append(f"with no sync at the end, {w.steps} warm steps miss {ms(max(grew, 0.0))} ms still queued "
                         f"({max(share, 0.0) * 100:.0f}% of their time)")
    elif t.no_device:
        parts.append("on CPU there is no queue to miss")
    return "; ".join(parts) + "."


def render(t: Timing) -> Group:
    table = Table(box=box.SIMPLE_HEAD, width=WIDTH, title="Honest timing", title_justify="left")
    table.add_column("", width=30, no_wrap=True)
    table.add_column("reads", justify="right", width=12, no_wrap=True)
    table.add_column("counts / misses", ratio=1)
    for row in rows(t):
        table.add_row(*row)
    lines: list[Any] = [table, Text(f"{NAIVE}." + (f" {WARM}." if t.device else ""))]
    if t.no_device:
        lines.append(Text(f"No device queue: {t.no_device}. {NO_QUEUE}."))
    elif t.device_short:
        lines.append(Text(f"device windows: {t.device_short}"))
    lines.append(Text(f"Reading: {reading(t)}", style="bold"))
    return Group(*lines)


# -- launching ----------------------------------------------------------------------------------
def _collect(conn: Any) -> tuple[list[float], float | None]:
    ends, seen = step_ends(list(conn.stream("loop", "signals").items), list(conn.steps))
    return ends, first_forward(conn.stream("coldstart", "marks").items) if seen else None


def _device_windows(agent: Any, timing: Timing, deadline: float, short: str, say: Any) -> None:
    """Warm windows of 20, 100, 400 steps, one after another, timed with CUDA events. Cut short
    (the job ended, or out of time): one step only, to tell a GPU job from a CPU one."""
    for n in (w for w in WINDOWS if w <= timing.steps_wanted):
        left = deadline - time.monotonic()
        if short or left <= 0:
            timing.device_short = f"the {n}-step window and later were not timed ({short or 'out of time'})"
            if timing.device or not agent.primary() or agent.primary().closed:
                return
            n, left = 1, 5.0
        reply = agent.request("cuda", {"steps": n, "timeout_s": left}, timeout=left + 5, name="device_time")
        if not reply.ok:
            if NO_CUDA in reply.error:
                timing.no_device, timing.device_short = reply.error, ""
            else:
                timing.device_short = f"the {n}-step window: {reply.error}"
            return
        window = device_window(reply.result)
        if window is None or n == 1:
            return
        say(f"timed {n} warm steps with CUDA events")
        timing.device.append(window)


def measure(cmd: list[str], steps: int, timeout: float, say: Any = print) -> Timing:
    """Launch the command with the agent, collect its steps and device windows; always end it."""
    from fieldguide.targets import LaunchTarget

    deadline = time.monotonic() + timeout
    target = LaunchTarget(cmd)
    try:
        agent = target.agent
        assert agent is not None
        if not target.wait_ready(timeout):
            reason = target.gone_reason() if not target.alive() else target.not_ready_reason(timeout)
            raise TargetFailed(reason, detail=target.log_tail(8))
        conn = agent.primary()
        assert conn is not None
        say(f"timing up to {steps} steps (at most {timeout:.0f} s in all)")

        def wait(enough: Any) -> str:
            while True:
                ends, _ = _collect(conn)
                if enough(ends):
                    return ""
                if not target.alive():
                    agent.wait_for(lambda: conn.closed, timeout=2.0)
                    return f"the job ended after {len(_collect(conn)[0])} steps"
                if time.monotonic() > deadline:
                    return f"{len(ends)} steps in {timeout:.0f} s (--timeout)"
                time.sleep(0.1)

        timing = Timing(ends=[], first_forward=None, steps_wanted=steps)
        # Device windows only once steps have settled: warm-up is what the naive timers show.
        short = wait(lambda e: len(e) >= steps or steady_step(list(enumerate(e))) is not None)
        _device_windows(agent, timing, deadline, short, say)
        timing.short = short or wait(lambda e: len(e) >= steps)
        ends, timing.first_forward = _collect(conn)
        timing.ends = ends[:steps]
        if not timing.ends:
            raise TargetFailed(f"no step was timed: {timing.short}", detail=target.log_tail(8))
        return timing
    finally:
        target.close()


def timing_command(cmd: list[str], steps: int = 400, timeout: float = 120.0) -> int:
    if steps < 2:
        raise BadInput(f"--steps must be at least 2, not {steps}")
    if timeout <= 0:
        raise BadInput(f"--timeout must be positive, not {timeout:g}")
    from fieldguide.report.consoles import console

    err = console(stderr=True)
    # The command as text, never as markup: a `[red]` in the job's arguments stays as it is.
    err.print(Text.assemble(("fieldguide timing", "bold"), ": launching ", " ".join(cmd)), soft_wrap=True)
    timing = measure(cmd, steps, timeout, say=lambda line: err.print(Text(line)))
    out = console()
    out.width = min(out.width, WIDTH)
    out.print(render(timing))
    return EXIT_CLEAN
