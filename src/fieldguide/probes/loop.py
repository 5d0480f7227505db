"""The training loop from inside: per-step wall time and time waiting for batches."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_PROCESS, Probe, ProbeContext
from fieldguide.probes.stats import median, quantile

WARMUP_STEPS = 3  # the first steps of a process (allocations, lazy init) say nothing about the loop


def loop_values(steps: list[list[Any]], iters: list[dict[str, Any]], window_start: float,
                window_end: float, steps_before: int) -> dict[str, Any]:
    """Loop values over the steps that ended inside [window_start, window_end].

    `steps` rows are [t_end, wall_s, data_wait_s, boundary]; `steps_before` is
    how many steps the process had finished before the first row (for warm-up).
    """
    rows = [row for i, row in enumerate(steps)
            if window_start <= row[0] <= window_end and steps_before + i >= WARMUP_STEPS]
    walls = [r[1] for r in rows]
    waits = [min(r[2], r[1]) for r in rows]
    wall_total = sum(walls)
    starts = [it for it in iters if window_start - (walls[0] if walls else 0) <= it["t_start"] <= window_end]
    stall = sum(it["first_batch_s"] for it in starts)
    return {
        "steps": len(rows),
        "boundary": ("optimizer.step" if rows and rows[-1][3] == "o" else "DataLoader batch") if rows else None,
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


@register
class LoopSteps(Probe):
    id = "loop.steps"
    title = "Time each training step and its wait for the next batch (in-process agent)"
    needs = frozenset({NEEDS_PROCESS, NEEDS_AGENT})
    params = {"seconds": 6.0, "min_steps": 8}
    values = {
        "steps": "", "boundary": "", "step_ms_median": "ms", "step_ms_p90": "ms", "data_wait_ms_median": "ms",
        "data_wait_ms_p90": "ms", "data_wait_fraction": "fraction", "steps_per_second": "1/s",
        "epoch_starts": "", "first_batch_ms_median": "ms", "startup_wait_fraction": "fraction",
    }

    def run(self, ctx: ProbeContext, seconds: float = 6.0, min_steps: int = 8) -> Measurement:
        agent = ctx.target.agent
        conn = agent.primary() if agent else None
        if conn is None:
            return self.cannot("the in-process agent is not connected")
        started = time.monotonic()
        seconds = min(seconds, ctx.budget_left)
        # Wait the window out, and longer (up to 3x) if steps are slow, so medians rest on enough steps.
        deadline_hard = started + max(seconds * 3, seconds + 1)
        while True:
            now = time.monotonic()
            in_window = [r for r in list(conn.steps) if r[0] >= started]
            ctx.on_reading({"probe": self.id, "elapsed": now - started, "of": seconds,
                            "step_ms": [round(r[1] * 1000, 2) for r in in_window[-120:]],
                            "wait_ms": [round(r[2] * 1000, 2) for r in in_window[-120:]]})
            if now - started >= seconds and (len(in_window) >= min_steps or now >= deadline_hard):
                break
            if now - started >= ctx.budget_left or not ctx.sleep(0.25):
                break
        if ctx.cancelled.is_set():
            return self.cannot("cancelled", seconds=time.monotonic() - started)
        end = time.monotonic()
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        values = loop_values(steps, list(conn.iters), started, end, steps_before)
        elapsed = end - started
        provenance = f"agent hooks (optimizer step post-hook, DataLoader __next__/__iter__), {elapsed:.1f} s window"
        if values["steps"] < 2:
            reason = (ctx.target.gone_reason() if not ctx.target.alive()
                      else f"only {values['steps']} training steps in {elapsed:.0f} s (no optimizer.step or DataLoader batches seen)")
            return self.cannot(reason, provenance=provenance, seconds=elapsed)
        window = [r for r in steps if started <= r[0] <= end]
        evidence = {
            "step_ms": [round(r[1] * 1000, 2) for r in window[-300:]],
            "data_wait_ms": [round(r[2] * 1000, 2) for r in window[-300:]],
            "epoch_starts": [it for it in conn.iters if started <= it["t_start"] <= end][:20],
        }
        return self.measurement(values=values, evidence=evidence, provenance=provenance, seconds=elapsed)
