"""How a launched job spent its start: the timeline from the process start to steady steps."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.analysis.coldstart import SHARE_TITLES, STEADY_WINDOW, from_connection
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_LAUNCH, NEEDS_PROCESS, Probe, ProbeContext


@register
class StartPhases(Probe):
    id = "start.phases"
    evidence_kinds = (ev.COLD_START, ev.TABLE)
    title = "The cold start: process start, imports, CUDA, model, first batch, first step, steady steps"
    needs = frozenset({NEEDS_PROCESS, NEEDS_LAUNCH, NEEDS_AGENT})
    reads_history = True
    params = {"settle": 30.0}  # most seconds to wait for the steps to settle
    values = {"seconds_to_steady": "s", "steady": "", "steady_step": "", "dominant": "", "dominant_s": "s",
              **{f"{name}_s": "s" for name in SHARE_TITLES},
              **{f"{name}_fraction": "fraction" for name in SHARE_TITLES},
              "imports_where": "", "data_setup_where": ""}
    parts = tuple(f"{name}_fraction" for name in SHARE_TITLES)

    def run(self, ctx: ProbeContext, settle: float = 30.0) -> Measurement:
        began = time.monotonic()
        target: Any = ctx.target
        conn = target.agent.primary() if target.agent is not None else None
        deadline = began + min(settle, ctx.budget_left)
        cold = from_connection(target.started, conn, time.monotonic())
        while (cold is None or not cold["steady"]) and time.monotonic() < deadline and target.alive():
            self.reading(ctx, elapsed=time.monotonic() - began, of=settle, status="waiting for steps to settle")
            if not ctx.sleep(0.5):
                break
            conn = target.agent.primary()
            cold = from_connection(target.started, conn, time.monotonic())
        seconds = time.monotonic() - began
        if cold is None:
            return self.cannot("the agent left no start marks (it did not load before the script ran)",
                               seconds=seconds)
        total = cold["total_s"]
        shares = cold["shares"]
        dominant = max(shares, key=lambda name: shares[name])
        values: dict[str, Any] = {"seconds_to_steady": total, "steady": cold["steady"],
                                  "steady_step": cold["steady_step"], "dominant": dominant,
                                  "dominant_s": shares[dominant]}
        for name, share in shares.items():
            values[f"{name}_s"] = share
            values[f"{name}_fraction"] = round(share / total, 4) if total > 0 else 0.0
        missing = {}
        for name in ("imports", "data_setup"):
            where = (cold.get("where") or {}).get(name)
            if where:
                values[f"{name}_where"] = where
            else:
                missing[f"{name}_where"] = "fewer than 3 samples of the main thread in it (10 a second)"
        provenance = ("agent marks on the system-wide monotonic clock from the spawn on: interpreter up "
                      "(sitecustomize), torch imported, torch.cuda._lazy_init, the first parameter registered, "
                      "the first forward, the first step; torch.load, init_process_group and compiles timed; the main thread's "
                      "line of the job's own code sampled 10 times a second until the first forward; "
                      f"steady = the first step from which {STEADY_WINDOW} steps have their mean within 10% of the "
                      "settled median, none over 3x it")
        if not cold["steady"]:
            provenance += f"; NOT steady yet after {total:.1f} s: the time so far"
        table = [{"phase": p["title"], "from_s": p["start_s"], "seconds": p["seconds"]} for p in cold["phases"]]
        return self.measurement(values=values, missing=missing, seconds=seconds, provenance=provenance,
                                evidence={"cold_start": cold, "table": table})
