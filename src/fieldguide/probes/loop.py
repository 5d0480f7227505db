"""The training loop from inside: per-step wall time and time waiting for batches."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.agent.inside.rows import StepRow
from fieldguide.analysis.stats import median, quantile
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import ProbeContext, stack_window
from fieldguide.probes.contention import main_thread_times, off_cpu_shares
from fieldguide.probes.input_stacks import InputStacks, input_stacks
from fieldguide.probes.step_cycle import user_frame
from fieldguide.probes.uncertainty import events_margin, ratio_margin, share_margin

BOUNDARY_NAMES = {"o": "optimizer.step", "k": "backward()", "b": "DataLoader batch"}
INPUT_SAMPLE_HZ = 50  # the agent's input-phase stack sampling; each sample costs the job ~30 us


def step_rows(rows: Iterable[Any]) -> list[StepRow]:
    """The agent's step rows as received (JSON lists), read by name. Pass a copy of a live
    stream (`list(conn.steps)`): the reader thread appends to it meanwhile."""
    return [StepRow.read(row) for row in rows]


@dataclass
class InputView:
    """What the training thread did in its input phases, from the agent's stack samples."""

    samples: int = 0
    io_share: float | None = None  # share in file/network I/O or serialization: writes after the step
    frame: str | None = None  # the user's function that spends the rest: "get_batch (train.py:116)"
    categories: dict[str, int] = field(default_factory=dict)


def input_view(stacks: InputStacks, min_samples: int = 5) -> InputView:
    """What the training thread's samples in its input phase (from a step's end to the next
    forward) were, by the stack classifier py-spy's samples use."""
    from fieldguide.probes.stack_categories import IO

    categories: collections.Counter[str] = collections.Counter()
    frames: collections.Counter[str] = collections.Counter()
    for sample in stacks.samples:
        category = sample.category
        categories[category] += sample.count
        user = user_frame(sample.stack, sample.leaf_line)
        if category != IO and user:
            frames[user] += sample.count
    total = sum(categories.values())
    if total < min_samples:
        return InputView(samples=total, categories=dict(categories))
    return InputView(samples=total, io_share=categories[IO] / total,
                     frame=frames.most_common(1)[0][0] if frames else None, categories=dict(categories))


def loop_values(steps: Iterable[Any], iters: list[dict[str, Any]], window_start: float,
                window_end: float, steps_before: int, warmup_steps: int = 3,
                view: InputView | None = None, outside: dict[str, Any] | None = None,
                ended: bool = False, margins: dict[str, float] | None = None,
                run_queue_share: float | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """Loop values over the steps that ended inside [window_start, window_end], and why any is missing.

    `steps` rows are the agent's [t_end, wall_s, loader_wait_s, boundary, input_s, ...];
    `steps_before` is how many steps the process had finished before the first row, so
    that its first `warmup_steps` (allocations, lazy init) are left out.
    Input: with a DataLoader, the wait inside its __next__ (timed, wherever the loop calls it);
    without one, the stack window's reading (`outside`: py-spy's samples of the training thread,
    the same reading attach mode makes, so the two modes cannot disagree on it: the loop's calls
    for its next batch, wherever in the step), else the input phase (from each backward or
    optimizer step to the next forward, torch.save time taken out).
    I/O: torch.save's own time, timed, plus what the stack window saw in other I/O.
    `margins`, if given, receives each share's uncertainty (probes/uncertainty.py).
    `run_queue_share`: the share of the window the training thread sat runnable, waiting for a
    core (schedstat). The producer's CPU share is of the time it could run: a loader whose work a
    busy machine keeps off the cores is CPU work waiting for a core, not a wait on I/O, as py-spy
    (which counts a runnable thread as active) reads it from outside.
    """
    runnable = 1.0 - min(max(run_queue_share or 0.0, 0.0), 0.9)
    rows = [row for i, row in enumerate(step_rows(steps))
            if window_start <= row.t_end <= window_end and steps_before + i >= warmup_steps]
    walls = [r.wall_s for r in rows]
    wall_total = sum(walls)
    missing: dict[str, str] = {}
    starts = [it for it in iters if window_start - (walls[0] if walls else 0) <= it["t_start"] <= window_end]
    stall = sum(it["first_batch_s"] for it in starts)
    loader_rows = [r for r in rows if r.loader_wait_s]
    phased = [r for r in rows if r.input_s is not None]
    input_from = None
    producer_cpu = None
    if loader_rows:
        input_from = "DataLoader.__next__"
        waits = [min(r.loader_wait_s, r.wall_s) for r in rows]
        in_workers = any((it.get("num_workers") or 0) > 0 for it in iters)
        loader_wait = sum(r.loader_wait_s for r in loader_rows)
        if in_workers:
            missing["producer_cpu_fraction"] = "batches come from DataLoader worker processes: their CPU is outside " \
                                               "the training thread"
        elif loader_wait and all(r.loader_cpu_s is not None for r in loader_rows):
            producer_cpu = min(sum(r.loader_cpu_s or 0.0 for r in loader_rows) / (loader_wait * runnable), 1.0)
    elif rows and outside and outside.get("data_wait_fraction") is not None and outside.get("input_from"):
        # py-spy reads without the GIL: the agent's own samples (taken with it) land after the GIL
        # is released, and saw a tokenizer that holds it in 10% of samples for 50% of the time.
        share = float(outside["data_wait_fraction"])
        input_from = str(outside["input_from"])  # as attach mode says it: the same samples
        waits = [r.wall_s * share for r in rows]
        if outside.get("producer") == "the training thread":
            producer_cpu = outside.get("producer_cpu_fraction")
        elif share:
            missing["producer_cpu_fraction"] = "too few samples making the batch to tell"
    elif phased and len(phased) * 2 >= len(rows):
        # The phase from the end of a step to the next forward, less what its stack samples show
        # was file/network I/O (a checkpoint or a log write after the step is not input).
        not_io = 1.0 - (view.io_share if view is not None and view.io_share is not None else 0.0)
        where = view.frame if view is not None and view.frame else None
        input_from = f"{where}, between steps" if where else "the time between a step and the next forward"
        waits = [min(max(r.input_s - (r.save_s or 0.0), 0.0) * not_io, r.wall_s) if r.input_s is not None else 0.0
                 for r in rows]
        phase_total = sum(r.input_s or 0.0 for r in phased)
        if phase_total:
            producer_cpu = min(sum(r.input_cpu_s or 0.0 for r in phased) / (phase_total * runnable), 1.0)
    else:
        waits = []
        missing["data_wait_fraction"] = ("no DataLoader, and no forward seen after a step "
                                         "(a model outside nn.Module?)") if rows else "no steps"
    if producer_cpu is None and "producer_cpu_fraction" not in missing:
        missing["producer_cpu_fraction"] = "too little input time to tell"
    saved = sum(r.save_s or 0.0 for r in rows)
    io_fraction = None
    io_at = None
    if wall_total and outside is not None and outside.get("io_fraction") is not None:
        # torch.save timed; the samples estimate only the I/O outside it.
        elsewhere = max(float(outside["io_fraction"]) - float(outside.get("torch_save_fraction") or 0.0), 0.0)
        io_fraction = min(saved / wall_total + elsewhere, 1.0)
        if outside.get("io_at"):
            io_at = str(outside["io_at"])
    elif wall_total and (saved or ended):
        # What a job that ended left is judged: torch.save's timed share, all that was measured.
        io_fraction = saved / wall_total
    else:
        missing["io_fraction"] = "no torch.save timed, and no stack window to see other I/O"
    backwards = [r.backwards for r in rows if r.backwards is not None]
    closures = [r.closures for r in rows if r.closures is not None]
    values = {
        "steps": len(rows),
        "boundary": BOUNDARY_NAMES.get(rows[-1].boundary, rows[-1].boundary) if rows else None,
        "input_from": input_from,
        "step_ms_median": _ms(median(walls)),
        "step_ms_p90": _ms(quantile(walls, 0.9)),
        "data_wait_ms_median": _ms(median(waits)),
        "data_wait_ms_p90": _ms(quantile(waits, 0.9)),
        "data_wait_fraction": sum(waits) / wall_total if wall_total and waits else None,
        "producer": "the training thread" if producer_cpu is not None else None,
        "producer_cpu_fraction": round(producer_cpu, 3) if producer_cpu is not None else None,
        "steps_per_second": len(rows) / wall_total if wall_total else None,
        "backwards_per_step": median(backwards),
        "closures_per_step": median(closures),
        "epoch_starts": len(starts),
        "first_batch_ms_median": _ms(median([it["first_batch_s"] for it in starts])),
        "startup_wait_fraction": min(stall / wall_total, 1.0) if wall_total else None,
        "io_fraction": round(io_fraction, 4) if io_fraction is not None else None,
        "save_fraction": round(saved / wall_total, 4) if wall_total else None,
        "io_at": io_at,
    }
    if margins is not None:
        margins.update(_margins(values, rows, waits, outside, len(starts)))
    return values, missing


def _margins(values: dict[str, Any], rows: list[StepRow], waits: list[float],
             outside: dict[str, Any] | None, epoch_starts: int) -> dict[str, float]:
    """The shares' uncertainties: timed per step, the steps' spread; read from the stack
    window, its samples; the start-up stall, the number of epoch starts it is made of."""
    found: dict[str, float] = {}
    walls = [r.wall_s for r in rows]
    samples = int((outside or {}).get("samples") or 0)
    wait = values.get("data_wait_fraction")
    if wait is not None:
        from_samples = values.get("input_from") == (outside or {}).get("input_from") and not any(
            r.loader_wait_s for r in rows)
        spread = share_margin(wait, samples) if from_samples and samples else ratio_margin(waits, walls)
        if spread is not None:
            found["data_wait_fraction"] = spread
    startup = values.get("startup_wait_fraction")
    if startup and epoch_starts:
        found["startup_wait_fraction"] = events_margin(startup, epoch_starts)
    io = values.get("io_fraction")
    if io is not None and walls:
        spread = ratio_margin([r.save_s or 0.0 for r in rows], walls) or 0.0
        if outside is not None and outside.get("io_fraction") is not None and samples:
            spread += share_margin(float(outside["io_fraction"]), samples)
        found["io_fraction"] = spread
    return {name: round(value, 4) for name, value in found.items()}


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _series(rows: list[Any], last: int) -> dict[str, list[float]]:
    padded = step_rows(rows[-last:])
    wait = [r.loader_wait_s if r.loader_wait_s or r.input_s is None else r.input_s for r in padded]
    return {"step_ms": [round(r.wall_s * 1000, 2) for r in padded],
            "data_wait_ms": [round(w * 1000, 2) for w in wait]}


class Background:
    """A request answered on a thread while the window runs, and its reply once it came. (A list
    that got the thread after the thread started once got a fast reply first: read as the thread.)"""

    def __init__(self, name: str, ask: Callable[[], Any]) -> None:
        self._reply: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(ask,), name=name, daemon=True)
        self._thread.start()

    def _run(self, ask: Callable[[], Any]) -> None:
        try:
            self._reply = ask()
        except Exception as err:  # the caller reads it from `error`; nothing is lost with the thread
            self._error = err

    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        """What the request raised instead of replying, if it did."""
        return self._error

    def result(self, timeout: float) -> Any:
        """The reply, or None if none came within `timeout` seconds or the request raised."""
        self._thread.join(timeout=timeout)
        return self._reply


@register
class LoopSteps(AgentProbe):
    id = "loop.steps"
    evidence_kinds = (ev.STEP_MS, ev.DATA_WAIT_MS, ev.EPOCH_STARTS, ev.INPUT_PHASE)
    title = "Time each training step and its wait for the next batch (in-process agent)"
    capability = "loop"
    reads_history = True
    params = {"seconds": 2.5, "min_steps": 8, "warmup_steps": 3}  # as long as the stack window beside it
    values = {
        "steps": "", "boundary": "", "input_from": "", "step_ms_median": "ms", "step_ms_p90": "ms",
        "data_wait_ms_median": "ms", "data_wait_ms_p90": "ms", "data_wait_fraction": "fraction",
        "producer": "", "producer_cpu_fraction": "fraction", "steps_per_second": "1/s", "backwards_per_step": "",
        "closures_per_step": "", "epoch_starts": "", "first_batch_ms_median": "ms",
        "startup_wait_fraction": "fraction", "device_step_ms_median": "ms", "device_step_ms_p90": "ms",
        "io_fraction": "fraction", "save_fraction": "fraction", "io_at": "", "run_queue_fraction": "fraction",
    }
    series = {"step_ms": "ms", "data_wait_ms": "ms"}

    def run(self, ctx: ProbeContext, seconds: float = 2.5, min_steps: int = 8, warmup_steps: int = 3) -> Measurement:
        conn = self.connection(ctx)
        if conn is None:
            return self.cannot("the in-process agent is not connected")
        lacking = self.lacks_capability(conn)
        if lacking:
            return self.cannot(lacking)
        failures = self.hook_failures(ctx, conn)
        if not ctx.target.alive():
            return self.from_history(ctx, conn, warmup_steps, failures, 0.0)
        started = time.monotonic()
        thread_before = main_thread_times(conn.pid) if conn.pid else None  # the training thread's, mostly
        # The window scales with the step time seen so far (a 2 s/step job needs more than 6 s
        # for min_steps), up to what the budget leaves.
        recent = [r.wall_s for r in step_rows(list(conn.steps)[-min_steps:])]
        typical = median(recent) or 0.0
        seconds = min(max(seconds, typical * min_steps * 1.2), ctx.budget_left)
        # Steps slower than they looked: wait on for min_steps, up to 3x, within the budget.
        deadline_hard = started + min(max(seconds * 3, seconds + 1), ctx.budget_left)
        sampled = self._sample_input_phase(ctx, conn, seconds)
        device = self._device_time(ctx, conn, seconds)
        while True:
            now = time.monotonic()
            in_window = [r for r in step_rows(list(conn.steps)) if r.t_end >= started]
            self.reading(ctx, elapsed=now - started, of=seconds, series=_series(in_window, 120))
            if now - started >= seconds and (len(in_window) >= min_steps or now >= deadline_hard):
                break
            if not ctx.sleep(0.25):
                break
        if ctx.cancelled.is_set():
            return self.cannot("cancelled", seconds=time.monotonic() - started)
        if not ctx.target.alive():  # it ended inside the window: judge what it left
            return self.from_history(ctx, conn, warmup_steps, failures, time.monotonic() - started)
        end = time.monotonic()
        _, run_queue = off_cpu_shares(thread_before, main_thread_times(conn.pid) if conn.pid else None, end - started)
        stacks = self._input_stacks(ctx, sampled)
        view = input_view(stacks) if stacks is not None else None
        outside = stack_window(ctx)
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        margins: dict[str, float] = {}
        values, missing = loop_values(steps, conn.iters, started, end, steps_before, warmup_steps, view, outside,
                                      margins=margins, run_queue_share=run_queue)
        if run_queue is not None:
            values["run_queue_fraction"] = round(run_queue, 3)  # the training thread's wait for a core
        elapsed = end - started
        provenance = self._provenance(values, f"{elapsed:.1f} s window", failures)
        if values["steps"] < 2:
            return self.cannot(f"only {values['steps']} training steps in {elapsed:.0f} s (no optimizer.step "
                               "or backward() seen)", provenance=provenance, seconds=elapsed)
        self._add_device_time(device, values, missing)
        if values.get("device_step_ms_median") is not None:
            provenance += "; on the GPU, device time per step from CUDA events (the synchronized step time)"
        window = [r for r in step_rows(steps) if started <= r.t_end <= end]
        evidence = self._evidence(window, conn.iters, started, end)
        if view is not None and view.samples:
            evidence["input_phase"] = {"samples": view.samples, "categories": view.categories,
                                       "io_share": view.io_share, "frame": view.frame}
        return self.measurement(values=values, missing=missing, provenance=provenance, seconds=elapsed,
                                evidence=evidence, margins=margins)

    def _sample_input_phase(self, ctx: ProbeContext, conn: Any, seconds: float) -> Background | None:
        """Ask the agent for input-phase stacks over the window, on a thread: only where nothing
        else will read the input (every sample costs the job). A DataLoader's wait is timed, and
        the walk's py-spy window reads the input calls from outside (loop_values prefers both)."""
        if "input_stacks" not in (conn.capabilities.get(self.capability) or {}).get("requests", []):
            return None
        recent = step_rows(list(conn.steps)[-20:])
        if any(r.loader_wait_s for r in recent) or ctx.window_coming("stacks.sample"):
            return None
        return Background("fieldguide-input-stacks", lambda: self.ask(
            ctx, {"seconds": seconds, "rate": INPUT_SAMPLE_HZ}, timeout=seconds + 5, name="input_stacks"))

    def _device_time(self, ctx: ProbeContext, conn: Any, seconds: float) -> Background | None:
        """On a GPU, CUDA events over the same window, asked on a thread. The host's step
        intervals run ahead of a device that queues work: the device's are the truth."""
        agent = ctx.target.agent
        if "cuda" not in conn.capabilities or agent is None:
            return None
        typical = median([r.wall_s for r in step_rows(list(conn.steps)[-10:])]) or 0.05
        steps = max(5, min(50, int(seconds / max(typical, 1e-3))))
        return Background("fieldguide-device-time", lambda: agent.request(
            "cuda", {"steps": steps, "timeout_s": seconds + 5}, timeout=seconds + 10, name="device_time"))

    @staticmethod
    def _add_device_time(device: Background | None, values: dict[str, Any], missing: dict[str, str]) -> None:
        from fieldguide.probes.cuda import step_times

        reply = device.result(timeout=15) if device is not None else None
        if reply is not None and reply.ok:
            times = step_times(reply.result.get("device_ms") or [], reply.result.get("host_ms") or [])
            values["device_step_ms_median"] = times["device_step_ms_median"]
            values["device_step_ms_p90"] = times["device_step_ms_p90"]
            return
        why = reply.error if reply is not None else "no CUDA capability in this agent"
        missing["device_step_ms_median"] = missing["device_step_ms_p90"] = why

    def _input_stacks(self, ctx: ProbeContext, sampled: Background | None) -> InputStacks | None:
        reply = sampled.result(timeout=5) if sampled is not None else None
        if reply is None or not reply.ok:
            return None
        from fieldguide.probes.stacks import SourceReader

        pid = ctx.target.pid or 0
        reader = SourceReader(pid) if pid else None
        return input_stacks(reply.result, pid, reader.statement if reader else (lambda file, line: ""))

    def from_history(self, ctx: ProbeContext, conn: Any, warmup_steps: int, failures: list[str],
                     elapsed: float) -> Measurement:
        """The target ended: judge every step it recorded (warm-up too, if that is all there is)."""
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        values, missing = loop_values(steps, conn.iters, float("-inf"), float("inf"), steps_before, warmup_steps,
                                      ended=True)
        scope = f"all {values['steps']} steps after warm-up recorded before the target ended"
        if values["steps"] < 2:
            values, missing = loop_values(steps, conn.iters, float("-inf"), float("inf"), steps_before, 0, ended=True)
            scope = f"all {values['steps']} steps recorded before the target ended, warm-up included"
        if values["steps"] < 1:
            return self.cannot(f"{ctx.target.gone_reason()} before a training step could be timed",
                               seconds=elapsed, applicable=False)
        return self.measurement(values=values, missing=missing, seconds=elapsed,
                                provenance=self._provenance(values, scope, failures),
                                evidence=self._evidence(steps, conn.iters, float("-inf"), float("inf")))

    @staticmethod
    def _provenance(values: dict[str, Any], scope: str, failures: list[str]) -> str:
        text = (f"agent hooks: steps end at each {values.get('boundary') or 'step'}, input from "
                f"{values.get('input_from') or 'nowhere seen'}; {scope}")
        return text + (f"; hooks that did not install: {'; '.join(failures)}" if failures else "")

    @staticmethod
    def _evidence(window: list[StepRow], iters: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
        return {**_series(window, 300), "epoch_starts": [it for it in iters if start <= it["t_start"] <= end][:20]}
