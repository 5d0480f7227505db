"""torch's debugging switches, read inside the target (or inferred from outside)."""

from __future__ import annotations

import time

import psutil

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_PROCESS, Probe, ProbeContext

SYNC_DEBUG_NAMES = {0: "default", 1: "warn", 2: "error"}


def debug_values(state: dict) -> dict:
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
class TorchFlags(Probe):
    id = "torch.flags"
    title = "Read torch's debugging switches inside the target"
    needs = frozenset({NEEDS_PROCESS, NEEDS_AGENT})
    params = {"timeout": 10.0}
    values = {"anomaly_detection": "", "autograd_profiler": "", "sync_debug_mode": "", "sync_debug_on": "",
              "cuda_launch_blocking": "", "deterministic_algorithms": "", "torch": "", "cuda": "",
              "num_threads": "", "debug_switches_on": "", "debug_switches": ""}

    def run(self, ctx: ProbeContext, timeout: float = 10.0) -> Measurement:
        assert ctx.target.agent is not None
        started = time.monotonic()
        reply = ctx.target.agent.request("state", timeout=timeout)
        elapsed = time.monotonic() - started
        if "error" in reply:
            return self.cannot(reply["error"], seconds=elapsed)
        state = reply["state"]
        if not state.get("torch_imported"):
            return self.cannot("the target has not imported torch", seconds=elapsed)
        where = "on the training thread" if state.get("sampled_on") == "training" else "from the agent thread"
        return self.measurement(values=debug_values(state), evidence={"state": state}, seconds=elapsed,
                                provenance=f"agent: torch.is_anomaly_enabled(), _profiler_enabled(), "
                                           f"get_sync_debug_mode(), environ; read {where}")


@register
class TorchFlagsOutside(Probe):
    id = "torch.flags.outside"
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
        seen = [name for name, on in (
            ("cuda_launch_blocking", values["cuda_launch_blocking"]),
            ("anomaly_detection (its per-op traceback capture in {} samples)".format(values["anomaly_trace_samples"]),
             (values["anomaly_trace_samples"] or 0) >= 1),
            ("autograd_profiler ({:.0%} of samples)".format(values["profiler_fraction"] or 0),
             (values["profiler_fraction"] or 0) >= 0.05)) if on]
        values["debug_switches"] = ", ".join(seen) or "none seen"
        return self.measurement(values=values, evidence={"top_stacks": stacks.evidence.get("top_stacks", [])},
                                seconds=time.monotonic() - started,
                                provenance="/proc/PID/environ; share of stack samples in anomaly-mode traceback "
                                           "capture and profiler frames")
