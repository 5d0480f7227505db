"""GPUs through NVML (fieldguide.host.nvml): the devices now, and a window of samples on the job's GPUs."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.host.nvml import Nvml, NvmlUnavailable, nvml_devices
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_GPU, Probe, ProbeContext

__all__ = ["GpuDevices", "GpuWindow", "NvmlUnavailable", "describe_device", "nvml_devices"]


def describe_device(module: Any, index: int) -> dict[str, Any]:
    """One GPU's identity and current state; `module` is pynvml or a constructed stand-in."""
    return Nvml(module).device(index)


@register
class GpuDevices(Probe):
    id = "gpu.devices"
    evidence_kinds = (ev.GPUS,)
    title = "GPUs through NVML: memory, utilization, clocks, power, processes"
    params = {}
    values = {"gpu_count": "", "nvml": "", "utilization_gpu_max": "%", "memory_used_mb_max": "MB"}

    def run(self, ctx: ProbeContext) -> Measurement:
        started = time.monotonic()
        try:
            devices = nvml_devices()
        except NvmlUnavailable as err:
            return self.cannot(str(err), seconds=time.monotonic() - started, provenance="NVML")
        utils = [d["utilization_gpu"] for d in devices if d["utilization_gpu"] is not None]
        mems = [d["memory_used_mb"] for d in devices if d["memory_used_mb"] is not None]
        values = {"gpu_count": len(devices), "nvml": "ok", "utilization_gpu_max": max(utils) if utils else None,
                  "memory_used_mb_max": max(mems) if mems else None}
        return self.measurement(values=values, evidence={"gpus": devices}, seconds=time.monotonic() - started,
                                provenance="NVML (nvidia-ml-py)")


def job_processes(pid: int | None) -> tuple[set[int], str | None]:
    """The job's pids (it and its descendants) and its CUDA_VISIBLE_DEVICES."""
    import psutil

    if pid is None:
        return set(), None
    try:
        proc = psutil.Process(pid)
        pids = {pid, *(c.pid for c in proc.children(recursive=True))}
        try:
            visible = proc.environ().get("CUDA_VISIBLE_DEVICES")
        except psutil.AccessDenied:
            visible = None
        return pids, visible
    except psutil.Error:
        return {pid}, None


@register
class GpuWindow(Probe):
    id = "gpu.window"
    evidence_kinds = (ev.GPUS, ev.DEVICES_FROM)
    title = "The job's GPUs over a window (NVML): utilization samples, per-process SM, clocks, power, GPM"
    needs = frozenset({NEEDS_GPU})
    params = {"seconds": 4.0}
    values = {
        "gpus": "", "job_on_gpu": "", "gpu_util_median": "%", "job_sm_util": "%", "others_sm_util": "%",
        "others_memory_mb": "MB", "job_memory_mb": "MB", "clock_fraction": "fraction", "power_fraction": "fraction",
        "throttled_fraction": "fraction", "throttle_reasons": "", "temperature_c_max": "C", "pcie_rx_mb_s": "MB/s",
        "pcie_tx_mb_s": "MB/s", "sm_active": "%", "tensor_active": "%",
    }

    def run(self, ctx: ProbeContext, seconds: float = 4.0) -> Measurement:
        from fieldguide.host.gpuwindow import job_devices, sample_window, summarize

        started = time.monotonic()
        pids, visible = job_processes(ctx.target.pid)
        seconds = max(1.0, min(seconds, ctx.budget_left))
        try:
            nvml = Nvml.open()
        except NvmlUnavailable as err:
            return self.cannot(str(err), provenance="NVML")
        try:
            indices, how = job_devices(nvml, pids, visible)
            holding = bool(pids) and how.startswith("the job's processes")

            def keep_going(elapsed: float) -> bool:
                self.reading(ctx, elapsed=elapsed, of=seconds, status=f"sampling GPU {', '.join(map(str, indices))}")
                return not ctx.cancelled.is_set()

            devices = sample_window(nvml, indices, pids, seconds, keep_going)
        finally:
            nvml.close()
        values, missing = summarize(devices, pids)
        per_device = values.pop("per_device", [])
        values["job_on_gpu"] = holding if pids else None
        if not pids:
            missing["job_on_gpu"] = "no target process: the machine alone (--local)"
        return self.measurement(values=values, missing=missing, evidence={"gpus": per_device, "devices_from": how},
                                seconds=time.monotonic() - started,
                                provenance=f"NVML over {seconds:.0f} s on GPU {', '.join(map(str, indices)) or 'none'} "
                                           f"({how}): the driver's utilization samples, per-process SM %, clocks "
                                           "and clock-event reasons, power, PCIe, GPM where the part has it")
