"""An op profile of a few steps with torch.profiler, inside the target.

The profiler costs ~2x while active, so the window is a few steps only.
"""

from __future__ import annotations

import time

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_PROCESS, Probe, ProbeContext


@register
class OpProfile(Probe):
    id = "torch.ops"
    title = "Profile a few steps with torch.profiler: ops per step and time inside ops"
    needs = frozenset({NEEDS_PROCESS, NEEDS_AGENT})
    params = {"steps": 5, "timeout": 30.0}
    values = {"ops_per_step": "", "median_op_us": "us", "op_time_fraction": "fraction",
              "profiled_steps": "", "profiled_step_ms": "ms", "loader_fraction": "fraction"}

    def run(self, ctx: ProbeContext, steps: int = 5, timeout: float = 30.0) -> Measurement:
        assert ctx.target.agent is not None
        started = time.monotonic()
        ctx.on_reading({"probe": self.id, "status": f"profiling {steps} steps with torch.profiler"})
        wait = min(timeout, max(ctx.budget_left, 5.0))
        # The agent drops the request past `timeout`, so a late profile never slows later nodes.
        reply = ctx.target.agent.request("profile", timeout=wait, steps=steps, timeout_s=wait)
        elapsed = time.monotonic() - started
        if "error" in reply:
            reason = ctx.target.gone_reason() if not ctx.target.alive() else reply["error"]
            return self.cannot(reason, seconds=elapsed)
        profile = reply["profile"]
        values = {
            "ops_per_step": round(profile["ops_per_step"], 1),
            "median_op_us": profile["median_op_us"],
            "op_time_fraction": profile["op_time_fraction"],
            "profiled_steps": profile["steps"],
            "profiled_step_ms": round(profile["wall_s"] * 1000 / max(profile["steps"], 1), 2),
            "loader_fraction": profile["loader_fraction"],
        }
        return self.measurement(values=values, evidence={"top_ops": profile["top_ops"]}, seconds=elapsed,
                                provenance=f"torch.profiler (CPU{' + CUDA' if profile.get('device_time_us') else ''}) "
                                           f"over {profile['steps']} steps; outermost aten ops, DataLoader time excluded")
