"""An op profile of a few steps with torch.profiler, inside the target.

The profiler costs ~2x while active, so the window is a few steps only. The job sends
kineto's trace; its numbers are read here (analysis/optrace.py), off the job's GIL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldguide.analysis.optrace import anomaly_seen, summarize_events, trace_events
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import ProbeContext, stack_window

if TYPE_CHECKING:
    from fieldguide.agent.channel import AgentReply, AgentServer

PERFETTO = "https://ui.perfetto.dev (Open trace file), or chrome://tracing"


def ask_profile(agent: AgentServer | None, steps: int, wait: float,
                keep: Callable[[], Path] | None = None) -> AgentReply:
    """Profile `steps` of the job's steps (the agent drops the request past `wait` seconds, so a
    late profile never slows later nodes); the reply's `profile` is the trace's summary, with
    the trace kept in `keep()`'s folder as a file for Perfetto where one is asked for. What the
    profile saw of anomaly mode is kept on the agent's connection for torch.flags."""
    from fieldguide.agent.channel import AgentReply

    if agent is None:
        return AgentReply(False, error="the in-process agent is not connected")
    reply = agent.request("opprofile", {"steps": steps, "timeout_s": wait}, timeout=wait + 1.0, name="profile")
    if not reply.ok:
        return reply
    sent = reply.result.get("profile") or {}
    try:
        trace = json.loads(sent["trace_json"])
        steps_run, wall = int(sent["steps"]), float(sent["wall_s"])
        waited = float(sent.get("ranks_waited_s") or 0.0)
        phased = None if sent.get("phased_s") is None else float(sent["phased_s"])
    except (KeyError, TypeError, ValueError) as err:
        return AgentReply(False, error=f"the profile's trace could not be read: {type(err).__name__}: {err}")
    profile = summarize_events(trace_events(trace), steps_run, wall, waited, phased)
    conn = agent.primary()
    if conn is not None:
        conn.op_profile_checks = anomaly_seen(profile)
    if keep is not None:
        from fieldguide import safewrite

        path = keep() / f"torch-profiler-{int(time.time())}.pt.trace.json"
        try:
            safewrite.write_text(path, sent["trace_json"])
            profile["trace"] = str(path)
        except (OSError, safewrite.UnsafePath) as err:  # the counts stand without the file
            profile["trace_error"] = f"{type(err).__name__}: {err}"
    return AgentReply(True, result={"profile": profile})


# Shares of the training thread the stack window names that are outside ops and not overhead: the
# loop's own work, I/O, sleeps and waits, a loop's input without a DataLoader (whose time the profile
# already leaves out).
NAMED_OUTSIDE_OPS = ("loop_work_fraction", "io_fraction", "sleep_fraction", "lock_wait_fraction",
                     "collective_fraction")


def named_outside_ops(window: dict[str, Any] | None) -> float:
    """The share of the training thread the stack window names as something other than ops and
    overhead: the loop's own work, I/O, sleeps, waits, and input made without a DataLoader (whose
    time the profile leaves out itself)."""
    if not window:
        return 0.0
    named = sum(float(window.get(name) or 0.0) for name in NAMED_OUTSIDE_OPS)
    if window.get("input_from") and window.get("input_from") != "DataLoader.__next__":
        named += float(window.get("data_wait_fraction") or 0.0)
    return named


def overhead_share(profile: dict[str, Any], window: dict[str, Any] | None) -> float:
    """The share of the step that is overhead (dispatch, Python between ops). The agent's profile
    reads ops over the model's step only (forward to update: `phase_fraction` of the time, from a
    step's end to the next forward, is left out): its time outside ops, as a share of the whole step.
    An agent that saw no phases: what is outside ops, less what the stack window names as something
    else (the profile's shares are of the steps without the DataLoader's time; the window's of all)."""
    op_time_fraction = float(profile["op_time_fraction"])
    loader_fraction = float(profile.get("loader_fraction") or 0.0)
    outside = 1.0 - op_time_fraction
    named = named_outside_ops(window)
    phases = profile.get("phase_fraction")
    if isinstance(phases, (int, float)):
        waited = float(profile.get("ranks_wait_fraction") or 0.0)
        share = outside * (1.0 - float(phases) - waited)
        # What the window names outside ops beyond the phases (a gradient norm logged between the
        # backward and the update; the next micro-batch made between two forwards) is in the
        # model's step here, and named in the budget already.
        return max(share - max(named - float(phases), 0.0), 0.0)
    if not window:
        return max(outside, 0.0)
    return max(outside - named / max(1.0 - loader_fraction, 0.05), 0.0)


@register
class OpProfile(AgentProbe):
    id = "torch.ops"
    evidence_kinds = (ev.TOP_OPS, ev.ARTIFACTS)
    title = "Profile a few steps with torch.profiler: ops per step and time inside ops"
    capability = "opprofile"
    params = {"steps": 5, "timeout": 30.0}
    values = {"ops_per_step": "", "median_op_us": "us", "op_time_fraction": "fraction",
              "profiled_steps": "", "profiled_step_ms": "ms", "loader_fraction": "fraction",
              "overhead_fraction": "fraction", "overhead_detail": "", "bookkeeping_fraction": "fraction",
              "ranks_wait_fraction": "fraction",
              "bookkeeping_at": "", "anomaly_checks_per_step": "", "anomaly_check_fraction": "fraction",
              "long_op_fraction": "fraction"}
    # From the walk's stack window: how much of the overhead is a framework's own code, and where.
    BOOKKEEPING_SHOWN = 0.1

    def run(self, ctx: ProbeContext, steps: int = 5, timeout: float = 30.0) -> Measurement:
        started = time.monotonic()
        self.hook_failures(ctx, self.connection(ctx))
        self.reading(ctx, status=f"profiling {steps} steps with torch.profiler")
        wait = min(timeout, max(ctx.budget_left, 5.0))
        reply = ask_profile(ctx.target.agent, steps, wait, keep=ctx.artifacts)
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
            "overhead_fraction": 1.0 - profile["op_time_fraction"],
            "ranks_wait_fraction": profile.get("ranks_wait_fraction"),
            # Anomaly mode's NaN checks inside backward nodes (an agent older than the count: None).
            "anomaly_checks_per_step": profile.get("anomaly_checks_per_step"),
            "anomaly_check_fraction": profile.get("anomaly_check_fraction"),
            "long_op_fraction": profile.get("long_op_fraction"),
        }
        window = stack_window(ctx)
        values["overhead_fraction"] = overhead_share(profile, window)
        values["bookkeeping_fraction"] = window.get("bookkeeping_fraction") if window else None
        values["bookkeeping_at"] = window.get("bookkeeping_at") if window else None
        detail = (f"{values['ops_per_step']:.0f} ops a step with a median of {values['median_op_us']:.1f} µs; "
                  f"{values['op_time_fraction']:.0%} of step time inside ops")
        phases = profile.get("phase_fraction")
        if isinstance(phases, (int, float)) and phases > 0.01:
            detail += (f" from the forward to the update; the {phases:.0%} from a step's end to the next forward "
                       "(input, the loop's own work) is named in the step budget")
        if (values["bookkeeping_fraction"] or 0.0) >= self.BOOKKEEPING_SHOWN:
            detail += (f"; a framework's own code in {values['bookkeeping_fraction']:.0%} of the training thread's "
                       f"samples, most in {values['bookkeeping_at']}")
        if values["anomaly_checks_per_step"]:
            detail += (f"; anomaly mode is on: {values['anomaly_checks_per_step']:.0f} NaN checks a step inside "
                       f"backward (isnan, _is_any_true), {values['anomaly_check_fraction'] or 0:.0%} of the time")
        values["overhead_detail"] = detail
        evidence: dict[str, Any] = {"top_ops": profile["top_ops"]}
        if profile.get("trace"):
            evidence["artifacts"] = [{"kind": "perfetto", "path": profile["trace"], "open_with": PERFETTO}]
        return self.measurement(values=values, evidence=evidence, seconds=elapsed,
                                provenance=f"torch.profiler (CPU{' + CUDA' if profile.get('device_time_us') else ''}) "
                                           f"over {profile['steps']} steps; outermost aten ops, DataLoader time and the wait for other ranks excluded")
