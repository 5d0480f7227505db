"""The training loop from inside: per-step wall time and time waiting for batches."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.agentprobe import AgentProbe
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.stats import median, quantile

BOUNDARY_NAMES = {"o": "optimizer.step", "b": "DataLoader batch"}


def loop_values(steps: list[list[Any]], iters: list[dict[str, Any]], window_start: float,
                window_end: float, steps_before: int, warmup_steps: int = 3) -> dict[str, Any]:
    """Loop values over the steps that ended inside [window_start, window_end].

    `steps` rows are [t_end, wall_s, data_wait_s, boundary]; `steps_before` is
    how many steps the process had finished before the first row, so that its
    first `warmup_steps` (allocations, lazy init) are left out.
    """
    rows = [row for i, row in enumerate(steps)
            if window_start <= row[0] <= window_end and steps_before + i >= warmup_steps]
    walls = [r[1] for r in rows]
    waits = [min(r[2], r[1]) for r in rows]
    wall_total = sum(walls)
    starts = [it for it in iters if window_start - (walls[0] if walls else 0) <= it["t_start"] <= window_end]
    stall = sum(it["first_batch_s"] for it in starts)
    return {
        "steps": len(rows),
        "boundary": BOUNDARY_NAMES.get(rows[-1][3], rows[-1][3]) if rows else None,
        "step_ms_median": _ms(median(walls)),
        "step_ms_p90": _ms(quantile(walls, 0.9)),
        "data_wait_ms_median": _ms(median(waits)),
        "data_wait_ms_p90": _ms(quantile(waits, 0.9)),
        "data_wait_fraction": sum(waits) / wall_total if wall_total else None,
        "steps_per_second": len(rows) / wall_total if wall_total else None,
        "epoch_starts": len(starts),
        "first_batch_ms_median": _ms(median([it["first_batch_s"] for it in starts])),
        "startup_wait_fraction": min(stall / wall_total, 1.0) if wall_total else None,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _series(rows: list[list[Any]], last: int) -> dict[str, list[float]]:
    return {"step_ms": [round(r[1] * 1000, 2) for r in rows[-last:]],
            "data_wait_ms": [round(r[2] * 1000, 2) for r in rows[-last:]]}


@register
class LoopSteps(AgentProbe):
    id = "loop.steps"
    title = "Time each training step and its wait for the next batch (in-process agent)"
    capability = "loop"
    reads_history = True
    params = {"seconds": 6.0, "min_steps": 8, "warmup_steps": 3}
    values = {
        "steps": "", "boundary": "", "step_ms_median": "ms", "step_ms_p90": "ms", "data_wait_ms_median": "ms",
        "data_wait_ms_p90": "ms", "data_wait_fraction": "fraction", "steps_per_second": "1/s",
        "epoch_starts": "", "first_batch_ms_median": "ms", "startup_wait_fraction": "fraction",
    }
    series = {"step_ms": "ms", "data_wait_ms": "ms"}

    def run(self, ctx: ProbeContext, seconds: float = 6.0, min_steps: int = 8, warmup_steps: int = 3) -> Measurement:
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
        seconds = min(seconds, ctx.budget_left)
        # Wait the window out, and longer (up to 3x) if steps are slow, so medians rest on enough steps.
        deadline_hard = started + max(seconds * 3, seconds + 1)
        while True:
            now = time.monotonic()
            in_window = [r for r in list(conn.steps) if r[0] >= started]
            self.reading(ctx, elapsed=now - started, of=seconds, series=_series(in_window, 120))
            if now - started >= seconds and (len(in_window) >= min_steps or now >= deadline_hard):
                break
            if now - started >= ctx.budget_left or not ctx.sleep(0.25):
                break
        if ctx.cancelled.is_set():
            return self.cannot("cancelled", seconds=time.monotonic() - started)
        if not ctx.target.alive():  # it ended inside the window: judge what it left
            return self.from_history(ctx, conn, warmup_steps, failures, time.monotonic() - started)
        end = time.monotonic()
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        values = loop_values(steps, conn.iters, started, end, steps_before, warmup_steps)
        elapsed = end - started
        provenance = self._provenance(f"{elapsed:.1f} s window", failures)
        if values["steps"] < 2:
            return self.cannot(f"only {values['steps']} training steps in {elapsed:.0f} s (no optimizer.step "
                               "or DataLoader batches seen)", provenance=provenance, seconds=elapsed)
        window = [r for r in steps if started <= r[0] <= end]
        return self.measurement(values=values, evidence=self._evidence(window, conn.iters, started, end),
                                provenance=provenance, seconds=elapsed)

    def from_history(self, ctx: ProbeContext, conn: Any, warmup_steps: int, failures: list[str],
                     elapsed: float) -> Measurement:
        """The target ended: judge every step it recorded (warm-up too, if that is all there is)."""
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        values = loop_values(steps, conn.iters, float("-inf"), float("inf"), steps_before, warmup_steps)
        scope = f"all {values['steps']} steps after warm-up recorded before the target ended"
        if values["steps"] < 2:
            values = loop_values(steps, conn.iters, float("-inf"), float("inf"), steps_before, 0)
            scope = f"all {values['steps']} steps recorded before the target ended, warm-up included"
        if values["steps"] < 1:
            return self.cannot(f"{ctx.target.gone_reason()} before a training step could be timed",
                               seconds=elapsed, applicable=False)
        return self.measurement(values=values, seconds=elapsed, provenance=self._provenance(scope, failures),
                                evidence=self._evidence(steps, conn.iters, float("-inf"), float("inf")))

    @staticmethod
    def _provenance(scope: str, failures: list[str]) -> str:
        text = f"agent hooks (optimizer step post-hook, DataLoader __next__/__iter__), {scope}"
        return text + (f"; hooks that did not install: {'; '.join(failures)}" if failures else "")

    @staticmethod
    def _evidence(window: list[list[Any]], iters: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
        return {**_series(window, 300), "epoch_starts": [it for it in iters if start <= it["t_start"] <= end][:20]}
