"""How fast should this step be: the step's FLOPs by dtype (counted by the agent over one step),
the rate achieved against this machine's calibrated peak, and the two fixable reasons a busy
device does its work the slow way that a CPU box can measure: a slow dtype (float64 where
float32 serves; float32 matmuls without TF32 on tensor cores) and intra-op threads below the
cores the job may use.

Launch mode counts. From outside (attach), the dtype is read from the native frames of the
training thread instead: BLAS names its routines by precision (s/d/c/z + gemm), so the share of
samples in double-precision kernels says what the FLOP count would.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.contention import ContentionWindow

SLOW_ON_ANY = ("float64", "complex128")
IDLE_LOOK_S = 1.0  # how long the machine's idle cores are read


def usable_cores(state: dict[str, Any], pid: int | None) -> tuple[float | None, str]:
    """The cores one rank of the job may use: its affinity, under its cgroup's quota, shared by the
    ranks on this node; and what limited it."""
    from fieldguide.probes.node_host import cgroup_cpus

    affinity = state.get("affinity") or state.get("cpus")
    if not isinstance(affinity, int) or affinity <= 0:
        return None, "the job's CPU affinity was not read"
    cores, why = float(affinity), f"{affinity} cores in its affinity"
    if pid is not None:
        quota, _ = cgroup_cpus(self_cgroup=Path(f"/proc/{pid}/cgroup"))
        if quota is not None and quota < cores:
            cores, why = quota, f"a cgroup quota of {quota:g} cores"
    try:
        ranks = int(state.get("local_world_size") or 1)
    except ValueError:
        ranks = 1
    if ranks > 1:
        cores, why = cores / ranks, f"{why}, shared by {ranks} ranks on this node"
    return cores, why


def slow_share(flops: dict[str, float], state: dict[str, Any]) -> tuple[float, str]:
    """The share of the step's FLOPs done the slow way, and the dtype it names: float64 anywhere;
    float32 matmuls on a CUDA GPU with tensor cores (compute capability 8+) with TF32 off and no
    autocast (convolutions use TF32 by default through cuDNN)."""
    total = sum(flops.values())
    if total <= 0:
        return 0.0, ""
    slow: dict[str, float] = {}
    tensor_cores = (state.get("cuda_capability") or [0])[0] >= 8
    tf32_off = state.get("matmul_precision") == "highest" and not state.get("cuda_tf32_matmul")
    for key, count in flops.items():
        dtype, device, family = (key.split() + ["", "", ""])[:3]
        if dtype in SLOW_ON_ANY:
            slow[dtype] = slow.get(dtype, 0.0) + count
        elif dtype == "float32" and device == "cuda" and family == "matmul" and tensor_cores and tf32_off:
            slow["float32 without TF32"] = slow.get("float32 without TF32", 0.0) + count
    if not slow:
        return 0.0, ""
    name = max(slow, key=lambda k: slow[k])
    return sum(slow.values()) / total, name


def dtype_mix(flops: dict[str, float]) -> str:
    total = sum(flops.values())
    by: dict[str, float] = {}
    for key, count in flops.items():
        dtype, device = (key.split() + ["", ""])[:2]
        by[f"{dtype} on {device}"] = by.get(f"{dtype} on {device}", 0.0) + count
    return ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])) if total else "none"


def peak_for(flops: dict[str, float], state: dict[str, Any]) -> tuple[float | None, str, bool]:
    """This machine's calibrated peak, in GFLOP/s, for the step's main dtype and device, where it
    came from, and whether it was measured here; uncalibrated, a known GPU's datasheet figure
    (not measured); None with the reason where there is neither."""
    from fieldguide.calibrate.cache import for_this_machine

    if not flops:
        return None, "no FLOPs counted", False
    main = max(flops, key=lambda k: flops[k]).split()
    dtype, device = main[0], main[1] if len(main) > 1 else "cpu"
    if device == "cuda":
        name = {"bfloat16": "gpu_matmul_tflops_bf16", "float16": "gpu_matmul_tflops_fp16"}.get(dtype)
        if name is None:
            tf32 = state.get("matmul_precision") in ("high", "medium") or state.get("cuda_tf32_matmul")
            name = "gpu_matmul_tflops_tf32" if tf32 else "gpu_matmul_tflops_fp32"
        scale = 1000.0
    else:
        name, scale = ("cpu_matmul_gflops_fp64" if dtype == "float64" else "cpu_matmul_gflops"), 1.0
    calibration = for_this_machine()
    if calibration is None:
        value, source = None, "this machine is not calibrated: `fieldguide calibrate` measures its peak (a minute)"
    else:
        value, source = calibration.lookup(name)
    if value is not None:
        return value * scale, f"{name}, {source}", True
    if device == "cuda" and state.get("cuda_device"):
        # Uncalibrated: the part's datasheet figure, marked as a table's (known_parts.py).
        from fieldguide.calibrate.known_parts import datasheet_peak

        sheet, sheet_source = datasheet_peak(str(state["cuda_device"]), name)
        if sheet is not None:
            return sheet * scale, sheet_source, False
        source = f"{source}; {sheet_source}"
    return None, source, False


@register
class StepEfficiency(AgentProbe):
    id = "torch.efficiency"
    evidence_kinds = (ev.RATE,)
    title = "The step's FLOPs by dtype (one step counted), the rate against this machine's peak, and its intra-op threads"
    capability = "efficiency"
    params = {"timeout": 20.0}
    values = {"gflop_per_step": "GFLOP", "dtype_mix": "", "slow_dtype_fraction": "fraction", "slow_dtype": "",
              "precision_share": "fraction",
              "precision_from": "", "achieved_gflops": "GFLOP/s", "peak_gflops": "GFLOP/s", "peak_fraction": "fraction",
              "intra_op_threads": "", "usable_cores": "cores", "idle_cores": "cores", "threads_from": "",
              "long_op_fraction": "fraction", "threads_gain": "fraction", "counted_step_ms": "ms"}

    def run(self, ctx: ProbeContext, timeout: float = 20.0) -> Measurement:
        started = time.monotonic()
        # The machine's idle cores over the count (the walk's own contention reading, at least
        # IDLE_LOOK_S long): what more threads could use, fieldguide's own work included.
        look = ContentionWindow(None)
        self.reading(ctx, status="counting one step's FLOPs by dtype")
        wait = min(timeout, max(ctx.budget_left, 5.0))
        reply = self.ask(ctx, {"count": True, "timeout_s": wait}, timeout=wait + 1.0)
        if not reply.ok:
            if not ctx.target.alive():
                return self.cannot(ctx.target.gone_reason(), seconds=time.monotonic() - started, applicable=False)
            return self.cannot(reply.error, seconds=time.monotonic() - started)
        state = reply.result
        flops = {str(k): float(v) for k, v in (state.get("flops") or {}).items()}
        gflop = round(sum(flops.values()) / 1e9, 3)
        # The counted step's own time (under the dispatch mode): what the count cost the job,
        # against the step's median beside it.
        counted = state.get("counted_s")
        values: dict[str, Any] = {"gflop_per_step": gflop, "dtype_mix": f"{dtype_mix(flops)} of {gflop:g} GFLOP a step",
                                  "counted_step_ms": round(float(counted) * 1000, 2)
                                  if isinstance(counted, (int, float)) else None}
        values["slow_dtype_fraction"], values["slow_dtype"] = slow_share(flops, state)
        origin = (state.get("origins") or {}).get("float64") or (state.get("origins") or {}).get("default_dtype")
        values["precision_from"] = (f"set by {_origin_text(origin)}" if origin else
                                    "the line that set it was not seen (tensors made in that dtype, or a conversion "
                                    "before the agent loaded)") if values["slow_dtype_fraction"] else None
        values.update(self._rate(ctx, flops, state))
        values.update(self._threads(ctx, state, look, started))
        # The step's time in the slow dtype's long ops (a matmul's share of the step times the
        # share of FLOPs in the slow dtype): the share the walk ranks this cause by.
        long_share = values.get("long_op_fraction")
        values["precision_share"] = round(values["slow_dtype_fraction"] * (long_share if isinstance(
            long_share, (int, float)) else 1.0), 3)
        rate = {k: values.get(k) for k in ("gflop_per_step", "dtype_mix", "achieved_gflops", "peak_gflops",
                                           "peak_fraction", "intra_op_threads", "usable_cores", "idle_cores",
                                           "counted_step_ms")}
        rate["peak_from"], rate["usable_why"] = values.pop("peak_from", None), values.pop("usable_why", None)
        rate["peak_measured"] = values.pop("peak_measured", None)
        evidence = {"rate": rate}
        return self.measurement(values=values, evidence=evidence, seconds=time.monotonic() - started,
                                provenance="agent: one step under a TorchDispatchMode with torch.utils.flop_counter's "
                                           "formulas; torch.get_num_threads(); the machine's idle cores over "
                                           "the loop window, or over the count (psutil)")

    def _rate(self, ctx: ProbeContext, flops: dict[str, float], state: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = {"achieved_gflops": None, "peak_gflops": None, "peak_fraction": None}
        steps = ctx.measure("loop.steps", {}) if ctx.measure is not None else None
        step_ms = steps.values.get("step_ms_median") if steps is not None and steps.ok else None
        total = sum(flops.values())
        if isinstance(step_ms, (int, float)) and step_ms > 0 and total > 0:
            found["achieved_gflops"] = round(total / 1e9 / (step_ms / 1000), 2)
        peak, source, measured = peak_for(flops, state)
        found["peak_from"], found["peak_measured"] = source, measured
        if peak is not None:
            found["peak_gflops"] = round(peak, 1)
            if found["achieved_gflops"] is not None:
                found["peak_fraction"] = round(found["achieved_gflops"] / peak, 3)
        return found

    def _threads(self, ctx: ProbeContext, state: dict[str, Any], look: ContentionWindow,
                 started: float) -> dict[str, Any]:
        threads = state.get("threads")
        ranks = ctx.measure("dist.ranks", {}) if ctx.measure is not None else None
        seen = ranks.values.get("ranks_seen") if ranks is not None and ranks.ok else None
        if isinstance(seen, int) and seen > 1 and not state.get("local_world_size"):
            # Ranks this walk found on this node, where the launcher set no LOCAL_WORLD_SIZE
            # (Lightning and mp.spawn start their ranks themselves).
            state = {**state, "local_world_size": str(seen)}
        cores, why = usable_cores(state, ctx.target.pid)
        # The loop window's reading of the machine where the walk took one (longer than a look of
        # our own, and no wait for it); else a look of IDLE_LOOK_S over the count.
        steps = ctx.measure("loop.steps", {}) if ctx.measure is not None else None
        idle = (steps.contention or {}).get("free_cores") if steps is not None and steps.ok else None
        if idle is None:
            ctx.sleep(max(IDLE_LOOK_S - (time.monotonic() - started), 0.0))
            idle = look.finish().get("free_cores")
        profile = ctx.measure("torch.ops", {"steps": 5}) if ctx.measure is not None else None
        long_share = profile.values.get("long_op_fraction") if profile is not None and profile.ok else None
        found: dict[str, Any] = {"intra_op_threads": threads, "usable_cores": None if cores is None else round(cores, 2),
                                 "idle_cores": None if idle is None else round(idle, 2), "long_op_fraction": long_share,
                                 "threads_from": _threads_origin(state), "threads_gain": None}
        if isinstance(threads, int) and threads > 0 and cores is not None and idle is not None \
                and isinstance(long_share, (int, float)):
            # More threads can use the cores the job may have and the machine leaves idle; only the
            # long ops split over them: the share of the step a full complement would save.
            reachable = min(cores, threads + idle)
            found["threads_gain"] = round(max(long_share * (1 - threads / reachable), 0.0), 3) if reachable > threads \
                else 0.0
        found["usable_why"] = why
        return found


def _origin_text(origin: dict[str, Any] | None) -> str | None:
    if not origin:
        return None
    at = f" at {origin['at']}" if origin.get("at") else ""
    return f"{origin.get('value')}{at}"


def _threads_origin(state: dict[str, Any]) -> str | None:
    """Where the intra-op thread count came from: the job's torch.set_num_threads call, else the
    environment it started with."""
    called = (state.get("origins") or {}).get("threads")
    if called:
        return f"set by torch.set_num_threads({called.get('value')})" + (f" at {called['at']}" if called.get("at") else "")
    env = state.get("env") or {}
    if env:
        by_job = set(state.get("env_set_by_job") or ())
        return "; ".join(f"{k}={v} " + ("set by the job's own code (os.environ) before torch read it" if k in by_job
                                        else "in the environment the job started with") for k, v in sorted(env.items()))
    return "torch's default here (no set_num_threads call, no OMP/MKL thread variable seen)"
