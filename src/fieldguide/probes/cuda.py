"""The job's CUDA work from inside (agent capability `cuda`, and the op profile's CUDA activity):
host syncs and where they are, honest device time per step, copies and kernels."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fieldguide.agent.channel import AgentReply
from fieldguide.analysis.stats import median, quantile
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_GPU, NEEDS_PROCESS, ProbeContext
from fieldguide.probes.opprofile import ask_profile

NO_CUDA = "has not initialised CUDA"
WARMUP_STEPS = 2


class CudaProbe(AgentProbe):
    """Asks the agent once for a few steps' measurement; a job with no CUDA work is skipped, and
    on a machine with no GPU the job is not even asked (a profile of a CPU job costs it steps)."""

    needs = frozenset({NEEDS_PROCESS, NEEDS_AGENT, NEEDS_GPU})

    def ask_steps(self, ctx: ProbeContext, request: str, steps: int, status: str, wait: float = 30.0,
                  asker: Callable[[float], AgentReply] | None = None) -> tuple[AgentReply, float, Measurement | None]:
        """The agent's reply to `request` over `steps` steps (or `asker`'s, given the seconds the
        agent may wait), the seconds it took, and the measurement that says why where it failed."""
        started = time.monotonic()
        self.reading(ctx, status=status)
        if asker is not None:
            reply = asker(min(wait, ctx.budget_left))
        else:
            reply = self.ask(ctx, {"steps": steps, "timeout_s": min(wait, ctx.budget_left)},
                             timeout=min(wait + 10, ctx.budget_left), name=request)
        seconds = time.monotonic() - started
        failed = None if reply.ok else self.cannot(reply.error, seconds=seconds,
                                                     applicable=NO_CUDA not in reply.error)
        return reply, seconds, failed


@register
class CudaSyncs(CudaProbe):
    id = "cuda.syncs"
    evidence_kinds = (ev.TABLE,)
    title = "Host-device synchronizations per step and the lines that make them (sync debug mode, a few steps)"
    capability = "cuda"
    params = {"steps": 5}
    values = {"syncs_per_step": "", "sync_at": "", "sync_sites": ""}

    def run(self, ctx: ProbeContext, steps: int = 5) -> Measurement:
        reply, seconds, failed = self.ask_steps(ctx, "syncs", steps,
                                                f"counting synchronizing CUDA calls over {steps} steps")
        if failed is not None:
            return failed
        sites = reply.result.get("sites") or []
        values = {"syncs_per_step": round(float(reply.result.get("per_step") or 0.0), 2),
                  "sync_at": sites[0]["where"] if sites else None, "sync_sites": len(sites)}
        return self.measurement(values=values, evidence={"table": sites}, seconds=seconds,
                                provenance=f"agent: torch.cuda.set_sync_debug_mode('warn') over {steps} steps, each "
                                           "warning counted at the job's own frame (not shown); the mode restored")


def step_times(device_ms: list[float], host_ms: list[float]) -> dict[str, Any]:
    """Medians and p90 of device and host time per step, the first steps left out."""
    device, host = device_ms[WARMUP_STEPS:] or device_ms, host_ms[WARMUP_STEPS:] or host_ms
    rounded = {name: round(v, 3) if v is not None else None for name, v in (
        ("device_step_ms_median", median(device)), ("device_step_ms_p90", quantile(device, 0.9)),
        ("host_step_ms_median", median(host)), ("host_step_ms_p90", quantile(host, 0.9)))}
    d, h = rounded["device_step_ms_median"], rounded["host_step_ms_median"]
    rounded["host_ahead_fraction"] = round(max(d - h, 0.0) / d, 3) if d and h is not None else None
    return rounded


@register
class CudaSteps(CudaProbe):
    id = "cuda.steps"
    evidence_kinds = (ev.DEVICE_MS, ev.HOST_MS)
    title = "Device time per step from CUDA events at step boundaries, beside the host's interval"
    capability = "cuda"
    params = {"steps": 20}
    values = {"device_step_ms_median": "ms", "device_step_ms_p90": "ms", "host_step_ms_median": "ms",
              "host_step_ms_p90": "ms", "host_ahead_fraction": "fraction", "queued_ms_at_end": "ms"}
    series = {"device_ms": "ms", "host_ms": "ms"}

    def run(self, ctx: ProbeContext, steps: int = 20) -> Measurement:
        reply, seconds, failed = self.ask_steps(ctx, "device_time", steps,
                                                f"timing {steps} steps with CUDA events", wait=60.0)
        if failed is not None:
            return failed
        device_ms = [float(v) for v in reply.result.get("device_ms") or []]
        host_ms = [float(v) for v in reply.result.get("host_ms") or []]
        values = {**step_times(device_ms, host_ms), "queued_ms_at_end": reply.result.get("queued_ms_at_end")}
        return self.measurement(values=values, evidence={"device_ms": device_ms, "host_ms": host_ms}, seconds=seconds,
                                provenance=f"agent: CUDA events recorded at {len(device_ms) + 1} step boundaries "
                                           f"(the first {WARMUP_STEPS} steps left out), the last one waited for off "
                                           "the training thread")


@register
class CudaProfile(CudaProbe):
    id = "cuda.profile"
    title = "Kernels and copies in a few profiled steps (torch.profiler with CUDA activity)"
    capability = "opprofile"
    params = {"steps": 5}
    values = {"kernels_per_step": "", "median_kernel_us": "us", "kernel_busy_fraction": "fraction",
              "h2d_pageable_per_step": "", "h2d_pageable_fraction": "fraction", "copy_fraction": "fraction"}

    def run(self, ctx: ProbeContext, steps: int = 5) -> Measurement:
        reply, seconds, failed = self.ask_steps(ctx, "profile", steps, f"profiling {steps} steps with CUDA activity",
                                                asker=lambda wait: ask_profile(ctx.target.agent, steps, wait))
        if failed is not None:
            return failed
        profile = reply.result.get("profile") or {}
        if "kernels_per_step" not in profile:
            return self.cannot("the profile holds no CUDA activity: the job runs no work on a GPU",
                               seconds=seconds, applicable=False)
        values = {name: profile.get(name) for name in self.values}
        return self.measurement(values=values, seconds=seconds,
                                provenance=f"agent: torch.profiler (CPU and CUDA activity) over {steps} steps; "
                                           "kernel time and host-to-device copies from pageable memory against "
                                           "the profiled wall time")
