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


def debug_values(state: dict[str, Any]) -> dict[str, Any]:
    sync = state.get("sync_debug_mode")
    values = {
        "anomaly_detection": state.get("anomaly_detection"),
        "autograd_profiler": state.get("autograd_profiler"),
        "sync_debug_mode": SYNC_DEBUG_NAMES.get(sync, sync) if sync is not None else "n/a (CUDA not initialized)",
        "sync_debug_on": bool(sync),
        "cuda_launch_blocking": bool(state.get("cuda_launch_blocking")),
        "deterministic_algorithms": state.get("deterministic_algorithms"),
        "torch": state.get("torch"),
        "cuda": state.get("cuda"),
        "num_threads": state.get("num_threads"),
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
              "num_threads": "", "debug_switches_on": "", "debug_switches": ""}

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
        where = {"training": "on the training thread", "agent": "from the agent thread",
                 "exit": "as the target exited"}.get(state.get("sampled_on"), "")
        provenance = (f"agent: torch.is_anomaly_enabled(), _profiler_enabled(), get_sync_debug_mode(), "
                      f"environ; read {where} at step {state.get('step_count')}")
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
