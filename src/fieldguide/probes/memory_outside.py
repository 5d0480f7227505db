"""Memory from outside the job (any target): its resident set over time, its peak against
its limits, and the other processes on its GPU (NVML)."""

from __future__ import annotations

import time
from typing import Any

import psutil

from fieldguide.agent.inside import memread
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_GPU, NEEDS_PROCESS, Probe, ProbeContext
from fieldguide.probes.memory_math import (
    MB,
    floors,
    growth,
    growth_margin,
    mb,
    sustained_rate,
    tightest,
)

SAMPLE_HZ = 5.0


def tree_uss(pid: int) -> int | None:
    """Unique bytes of the job and its children (smaps: slower, so read at the window's ends only).
    Forked DataLoader workers share the parent's pages, which RSS counts once per process."""
    try:
        return int(psutil.Process(pid).memory_full_info().uss) + children_uss(pid)
    except psutil.Error:  # gone, or smaps not readable (another user)
        return None


def main_rss(pid: int) -> int | None:
    """Resident bytes of the job's own process; None once it is gone."""
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


def children_uss(pid: int) -> int:
    """Unique bytes of the job's children (DataLoader workers). Not their RSS: a forked worker's
    RSS grows as it touches pages it shares with the job, which is no new memory at all."""
    total = 0
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    for child in children:
        try:
            total += child.memory_full_info().uss
        except psutil.Error:
            pass
    return total


@register
class MemoryGrowthOutside(Probe):
    id = "memory.growth.outside"
    evidence_kinds = (ev.RSS, ev.GPU_USED)
    title = "The job's resident memory over time, from outside (psutil)"
    needs = frozenset({NEEDS_PROCESS})
    params = {"seconds": 10.0}
    values = {"growth_mb_per_min": "MB/min", "growth_fit_r2": "", "grew_mb": "MB", "used_mb": "MB",
              "memory_kind": "", "samples": "", "uss_mb": "MB", "uss_grew_mb": "MB", "what_grows": "",
              "kept_by": "", "gpu_used_mb": "MB"}
    series = {"used_mb": "MB"}

    def run(self, ctx: ProbeContext, seconds: float = 10.0) -> Measurement:
        started = time.monotonic()
        pid = ctx.target.pid
        assert pid is not None
        seconds = min(seconds, max(ctx.budget_left - 2.0, 1.0))
        ts: list[float] = []
        used: list[float] = []
        gpu = GpuSampler(pid)
        uss_first = tree_uss(pid)
        workers, workers_at = children_uss(pid), time.monotonic()
        while time.monotonic() - started < seconds:
            rss = main_rss(pid)
            if rss is None:
                return self.cannot(ctx.target.gone_reason(), applicable=False)
            ts.append(time.monotonic())
            if ts[-1] - workers_at >= 1.0:  # smaps is slow to read: the workers once a second
                workers, workers_at = children_uss(pid), ts[-1]
            used.append(float(rss + workers))
            gpu.sample(ts[-1])
            self.reading(ctx, elapsed=ts[-1] - started, of=seconds, series={"used_mb": [u / MB for u in used[-60:]]})
            if not ctx.sleep(1.0 / SAMPLE_HZ):
                if ctx.cancelled.is_set():
                    return self.cannot("cancelled")
                return self.cannot(ctx.target.gone_reason(), applicable=False)
        trend = growth(*floors(ts, used)) if used else None
        uss_last = tree_uss(pid)
        values: dict[str, Any] = {"samples": len(used), "used_mb": mb(used[-1]) if used else None,
                                  "memory_kind": "RSS of the job (USS of its workers)",
                                  "what_grows": "the job's resident memory (from outside, tensors cannot be named)",
                                  "kept_by": "not visible from outside: launch the job under fieldguide to name it",
                                  "uss_mb": mb(uss_last), "uss_grew_mb": mb(uss_last - uss_first)
                                  if uss_first is not None and uss_last is not None else None}
        missing: dict[str, str] = {}
        margins: dict[str, float] = {}
        if trend is None:
            missing["growth_mb_per_min"] = f"{len(used)} samples: too few to fit a trend"
        else:
            values["growth_mb_per_min"] = round((sustained_rate(trend) or 0.0) * 60 / MB, 2)
            values["growth_fit_r2"] = round(trend.r2, 3)
            values["grew_mb"] = round(trend.total / MB, 1)
            margins["growth_mb_per_min"] = round(growth_margin(trend) * 60 / MB, 2)
        gpu.close()
        gpu_trend = growth(gpu.ts, gpu.used)
        if gpu_trend is not None:
            # The job's GPU memory as NVML sees it (its allocator's reservations): the larger growth decides.
            values["gpu_used_mb"] = mb(gpu.used[-1])
            gpu_rate = round((sustained_rate(gpu_trend) or 0.0) * 60 / MB, 2)
            if trend is None or gpu_rate > values["growth_mb_per_min"]:
                values.update(growth_mb_per_min=gpu_rate, growth_fit_r2=round(gpu_trend.r2, 3),
                              grew_mb=round(gpu_trend.total / MB, 1), memory_kind="GPU memory of the job (NVML)")
                margins["growth_mb_per_min"] = round(growth_margin(gpu_trend) * 60 / MB, 2)
                missing.pop("growth_mb_per_min", None)
        return self.measurement(values=values, missing=missing, margins=margins, evidence={"rss": [round(u) for u in used],
                                                                          "gpu_used": [round(u) for u in gpu.used]},
                                seconds=time.monotonic() - started,
                                provenance=f"psutil memory_info().rss of the job at {SAMPLE_HZ:.0f} Hz plus its workers' USS "
                                           "(memory_full_info) once a second, "
                                           "memory_full_info().uss at the window's ends; "
                                           f"{gpu.provenance}; "
                                           "no tensor attribution from outside (launch the job for that)")


class GpuSampler:
    """The job's GPU memory per NVML, once a second; silent (and says why) without NVML."""

    def __init__(self, pid: int, module: Any | None = None) -> None:
        from fieldguide.host.nvml import Nvml, NvmlUnavailable

        self.pid = pid
        self.ts: list[float] = []
        self.used: list[float] = []
        self.last = 0.0
        self.nvml: Nvml | None = None
        try:
            self.nvml = Nvml.open(module)
            self.count = self.nvml.count()
            self.provenance = "NVML per-process used GPU memory once a second"
        except (NvmlUnavailable, Exception) as err:
            self.provenance = f"no GPU memory sampled: {err}"
            if self.nvml is not None:
                self.nvml.close()
            self.nvml = None

    def sample(self, now: float) -> None:
        if self.nvml is None or now - self.last < 1.0:
            return
        self.last = now
        try:
            job = {self.pid, *(c.pid for c in psutil.Process(self.pid).children(recursive=True))}
            total = sum(used or 0 for i in range(self.count)
                        for pid, used in self.nvml.compute_pids(i).items() if pid in job)
        except Exception:
            return
        if total:
            self.ts.append(now)
            self.used.append(float(total))

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None


@register
class MemoryUsageOutside(Probe):
    id = "memory.usage.outside"
    evidence_kinds = (ev.LIMITS,)
    title = "The job's peak memory against its limits, from /proc and its cgroup"
    needs = frozenset({NEEDS_PROCESS})
    params = {}
    values = {"oom": "", "peak_fraction_of_limit": "fraction", "limit": "", "limit_mb": "MB", "peak_mb": "MB",
              "headroom_mb": "MB"}

    def run(self, ctx: ProbeContext) -> Measurement:
        started = time.monotonic()
        pid = ctx.target.pid
        if pid is None or not ctx.target.alive():
            return self.cannot(ctx.target.gone_reason(), applicable=False)
        limits = memread.host_limits(str(pid))
        limit = tightest(limits)
        if limit is None:
            return self.cannot(f"cannot read /proc/{pid}/status or its limits", seconds=time.monotonic() - started)
        values = {"oom": False, "peak_fraction_of_limit": round(limit["fraction"], 3), "limit": limit["kind"],
                  "limit_mb": mb(limit["limit"]), "peak_mb": mb(limit["peak"]),
                  "headroom_mb": mb(max(limit["limit"] - limit["peak"], 0))}
        return self.measurement(values=values, evidence={"limits": limits}, seconds=time.monotonic() - started,
                                provenance=f"/proc/{pid}/status (VmHWM, VmPeak), /proc/{pid}/limits, its cgroup's "
                                           "memory.max, /proc/meminfo MemAvailable")


def gpu_others(devices: list[dict[str, Any]], job_pids: set[int],
               names: dict[int, str] | None = None) -> dict[str, Any] | None:
    """On the GPUs where the job holds memory, who else does, and how much; None if it holds none."""
    names = names or {}
    mine = [d for d in devices if any(p["pid"] in job_pids for p in d.get("processes") or [])]
    if not mine:
        return None
    worst: dict[str, Any] | None = None
    for device in mine:
        others = [p for p in device.get("processes") or [] if p["pid"] not in job_pids]
        others_mb = sum(p.get("used_mb") or 0 for p in others)
        job_mb = sum(p.get("used_mb") or 0 for p in device.get("processes") or [] if p["pid"] in job_pids)
        total = device.get("memory_total_mb") or 0
        row = {"gpu": device["index"], "others_mb": others_mb, "job_mb": job_mb, "total_mb": total,
               "others_fraction_of_total": round(others_mb / total, 3) if total else None,
               "others": [{"pid": p["pid"], "used_mb": p.get("used_mb"), "command": names.get(p["pid"], "?")}
                          for p in sorted(others, key=lambda p: -(p.get("used_mb") or 0))]}
        if worst is None or (row["others_fraction_of_total"] or 0) > (worst["others_fraction_of_total"] or 0):
            worst = row
    return worst


def describe_process(pid: int) -> str:
    try:
        proc = psutil.Process(pid)
        return f"{proc.username()}: {' '.join(proc.cmdline())[:80] or proc.name()}"
    except psutil.Error:
        return "not visible from here (another container or user)"


@register
class MemoryGpuOthers(Probe):
    id = "memory.gpu.others"
    evidence_kinds = (ev.GPU,)
    title = "Other processes holding memory on the job's GPU (NVML)"
    needs = frozenset({NEEDS_PROCESS, NEEDS_GPU})
    params = {}
    values = {"others_fraction_of_total": "fraction", "others_mb": "MB", "job_mb": "MB", "total_mb": "MB",
              "other_processes": "", "others": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        from fieldguide.host.nvml import NvmlUnavailable, nvml_devices

        started = time.monotonic()
        pid = ctx.target.pid
        assert pid is not None
        try:
            devices = nvml_devices()
        except NvmlUnavailable as err:
            return self.cannot(str(err), seconds=time.monotonic() - started)
        try:
            job = {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            return self.cannot(ctx.target.gone_reason(), applicable=False)
        pids = {p["pid"] for d in devices for p in d.get("processes") or []}
        found = gpu_others(devices, job, {p: describe_process(p) for p in pids - job})
        if found is None:
            return self.cannot("the job holds no GPU memory that NVML sees (a CPU job, or not started on the GPU yet)",
                               applicable=False, seconds=time.monotonic() - started)
        values = {k: found[k] for k in ("others_fraction_of_total", "others_mb", "job_mb", "total_mb")}
        values["other_processes"] = len(found["others"])
        values["others"] = "; ".join(f"pid {o['pid']} ({o['command']}) {o['used_mb']} MB"
                                     for o in found["others"][:3]) or "none"
        return self.measurement(values=values, evidence={"gpu": found}, seconds=time.monotonic() - started,
                                provenance="NVML nvmlDeviceGetComputeRunningProcesses on the GPU the job uses; "
                                           "PIDs are the host's (they can differ inside a container)")
