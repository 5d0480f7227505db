"""An op profile of a few steps with torch.profiler, inside the target.

The profiler costs ~2x while active, so the window is a few steps only.
"""

from __future__ import annotations

import time

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.agentprobe import AgentProbe
from fieldguide.probes.base import ProbeContext


@register
class OpProfile(AgentProbe):
    id = "torch.ops"
    title = "Profile a few steps with torch.profiler: ops per step and time inside ops"
    capability = "opprofile"
    params = {"steps": 5, "timeout": 30.0}
    values = {"ops_per_step": "", "median_op_us": "us", "op_time_fraction": "fraction",
              "profiled_steps": "", "profiled_step_ms": "ms", "loader_fraction": "fraction"}

    def run(self, ctx: ProbeContext, steps: int = 5, timeout: float = 30.0) -> Measurement:
        started = time.monotonic()
        self.hook_failures(ctx, self.connection(ctx))
        self.reading(ctx, status=f"profiling {steps} steps with torch.profiler")
        wait = min(timeout, max(ctx.budget_left, 5.0))
        # The agent drops the request past `timeout_s`, so a late profile never slows later nodes.
        reply = self.ask(ctx, {"steps": steps, "timeout_s": wait}, timeout=wait + 1.0)
        elapsed = time.monotonic() - started
        if not reply.ok:
            if not ctx.target.alive():
                return self.cannot(ctx.target.gone_reason(), seconds=elapsed, applicable=False)
            return self.cannot(reply.error, seconds=elapsed)
        profile = reply.result["profile"]
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
