"""torch's debugging switches, read inside the target (or inferred from outside)."""

from __future__ import annotations

import time
from typing import Any

import psutil

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext

SYNC_DEBUG_NAMES = {0: "default", 1: "warn", 2: "error"}


# Not a judgement: how old an op profile's NaN checks may be and still speak for the job now.
OP_PROFILE_FRESH_S = 300.0


def anomaly_evidence(state: dict[str, Any]) -> list[str]:
    """Each way anomaly mode was seen on, described: at the step boundary, while backwards ran,
    by the NaN checks it adds to backward in an op profile. Empty: seen off everywhere it was read."""
    seen = []
    if state.get("anomaly_detection"):
        seen.append("on at the step boundary")
    window = state.get("during_backward") or {}
    if window.get("anomaly"):
        seen.append(f"on in {window['anomaly']} of {window.get('backwards')} backwards as each began")
    checks = state.get("op_profile") or {}
    if checks.get("anomaly_checks_per_step") and (checks.get("age_s") or 0.0) <= OP_PROFILE_FRESH_S:
        seen.append(f"{checks['anomaly_checks_per_step']:.0f} NaN checks (isnan, _is_any_true) a step inside "
                    f"backward in an op profile ({checks.get('anomaly_check_fraction') or 0:.0%} of its time)")
    return seen


def debug_values(state: dict[str, Any]) -> dict[str, Any]:
    sync = state.get("sync_debug_mode")
    window = state.get("during_backward") or {}
    anomaly = anomaly_evidence(state)
    profiler_seen = [where for where, on in (("at the step boundary", state.get("autograd_profiler")),
                                             (f"in {window.get('profiler')} of {window.get('backwards')} backwards",
                                              window.get("profiler"))) if on]
    values = {
        # On while the job trained, however it was seen; None where the switch could not be read.
        "anomaly_detection": bool(anomaly) if anomaly or state.get("anomaly_detection") is not None else None,
        "autograd_profiler": bool(profiler_seen) if profiler_seen or state.get("autograd_profiler") is not None
        else None,
        "sync_debug_mode": SYNC_DEBUG_NAMES.get(sync, sync) if sync is not None else "n/a (CUDA not initialized)",
        "sync_debug_on": bool(sync),
        "cuda_launch_blocking": bool(state.get("cuda_launch_blocking")),
        "deterministic_algorithms": state.get("deterministic_algorithms"),
        "torch": state.get("torch"),
        "cuda": state.get("cuda"),
        "num_threads": state.get("num_threads"),
        "backwards_read": window.get("backwards"),
        "anomaly_seen": "; ".join(anomaly) or "off",
        "profiler_seen": "; ".join(profiler_seen) or "off",
    }
    on = [k for k in ("anomaly_detection", "autograd_profiler", "sync_debug_on", "cuda_launch_blocking") if values[k]]
    values["debug_switches_on"] = len(on)
    values["debug_switches"] = ", ".join(on) or "none"
    return values


@register
class TorchFlags(AgentProbe):
    id = "torch.flags"
    evidence_kinds = (ev.STATE,)
    title = "Read torch's debugging switches inside the target"
    capability = "torchstate"
    reads_history = True
    params = {"timeout": 10.0}
    values = {"anomaly_detection": "", "autograd_profiler": "", "sync_debug_mode": "", "sync_debug_on": "",
              "cuda_launch_blocking": "", "deterministic_algorithms": "", "torch": "", "cuda": "",
              "num_threads": "", "debug_switches_on": "", "debug_switches": "", "backwards_read": "",
              "anomaly_seen": "", "profiler_seen": ""}

    def run(self, ctx: ProbeContext, timeout: float = 10.0) -> Measurement:
        started = time.monotonic()
        conn = self.connection(ctx)
        failures = self.hook_failures(ctx, conn)
        if ctx.target.alive():
            reply = self.ask(ctx, timeout=min(timeout, ctx.budget_left))
            if not reply.ok:
                return self.cannot(reply.error, seconds=time.monotonic() - started)
            state = reply.result["state"]
        else:  # it ended: the last snapshot it left (first step, exit)
            snapshots = list(conn.stream(self.capability, "snapshots").items) if conn is not None else []
            if not snapshots:
                return self.cannot(f"{ctx.target.gone_reason()} before torch's state was read",
                                   applicable=False)
            state = snapshots[-1]
        elapsed = time.monotonic() - started
        if not state.get("torch_imported"):
            return self.cannot("the target has not imported torch", seconds=elapsed)
        checks = dict(conn.op_profile_checks) if conn is not None and conn.op_profile_checks else None
        if checks is not None:  # what an op profile fieldguide read saw of anomaly mode
            checks["age_s"] = round(time.monotonic() - checks.pop("t", time.monotonic()), 1)
            state = {**state, "op_profile": checks}
        where = {"training": "on the training thread", "agent": "from the agent thread",
                 "exit": "as the target exited"}.get(state.get("sampled_on"), "")
        provenance = (f"agent: torch.is_anomaly_enabled(), _profiler_enabled(), get_sync_debug_mode(), "
                      f"environ; read {where} at step {state.get('step_count')}")
        window = state.get("during_backward")
        if window is not None and state.get("backward_hooked"):
            provenance += (f"; anomaly mode and the profiler also read as each of {window.get('backwards')} "
                           f"backwards began ({'since the request' if ctx.target.alive() else 'over the whole run'})")
        elif state.get("backward_hooked") is False:
            provenance += "; not read during backward (the hook did not install)"
        if state.get("op_profile"):
            provenance += f"; an op profile {state['op_profile'].get('age_s')} s before counted anomaly mode's NaN checks"
        if failures:
            provenance += f"; hooks that did not install: {'; '.join(failures)}"
        return self.measurement(values=debug_values(state), evidence={"state": state}, seconds=elapsed,
                                provenance=provenance)


@register
class TorchFlagsOutside(Probe):
    id = "torch.flags.outside"
    evidence_kinds = (ev.TOP_STACKS,)
    title = "Infer debugging switches from outside: the environment and the stacks"
    needs = frozenset({NEEDS_PROCESS})
    params = {}
    values = {"cuda_launch_blocking": "", "anomaly_trace_fraction": "fraction", "anomaly_trace_samples": "",
              "profiler_fraction": "fraction",
              "debug_switches": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        started = time.monotonic()
        try:
            environ = psutil.Process(ctx.target.pid).environ()
        except psutil.NoSuchProcess:
            return self.cannot(ctx.target.gone_reason())
        except psutil.AccessDenied:
            return self.cannot("cannot read the target's environment (access denied)")
        assert ctx.measure is not None
        stacks = ctx.measure("stacks.sample", {})
        if not stacks.ok:
            return self.cannot(f"stack samples needed: {stacks.unavailable}", seconds=time.monotonic() - started)
        values = {
            "cuda_launch_blocking": environ.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"),
            "anomaly_trace_fraction": stacks.values.get("anomaly_trace_fraction"),
            "anomaly_trace_samples": stacks.values.get("anomaly_trace_samples"),
            "profiler_fraction": stacks.values.get("profiler_fraction"),
        }
        # What was seen at all, described; whether it is enough to matter is the playbook's call.
        seen = [name for name, on in (
            ("CUDA_LAUNCH_BLOCKING set", values["cuda_launch_blocking"]),
            ("anomaly-mode traceback capture in {} samples".format(values["anomaly_trace_samples"]),
             bool(values["anomaly_trace_samples"])),
            ("profiler frames in {:.0%} of samples".format(values["profiler_fraction"] or 0),
             bool(values["profiler_fraction"]))) if on]
        values["debug_switches"] = ", ".join(seen) or "none seen"
        return self.measurement(values=values, evidence={"top_stacks": stacks.evidence.get("top_stacks", [])},
                                seconds=time.monotonic() - started,
                                provenance="/proc/PID/environ; share of stack samples in anomaly-mode traceback "
                                           "capture and profiler frames")
