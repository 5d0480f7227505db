"""GPUs through NVML (nvidia-ml-py). Readings a device does not support become None, not errors.

pynvml is imported only when a probe runs. No NVML library, no driver, or no
GPU is a reading with its reason.
"""

from __future__ import annotations

import time
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import Probe, ProbeContext


class NvmlUnavailable(Exception):
    """NVML cannot be used here; str() is the reason for the user."""


def _read(nvml: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None  # NotSupported / NoPermission vary by SKU and VM


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def describe_device(nvml: Any, index: int) -> dict[str, Any]:
    """One GPU's identity and current state; `nvml` is the pynvml module (or a constructed fake)."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    mem = _read(nvml, nvml.nvmlDeviceGetMemoryInfo, h)
    util = _read(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
    power = _read(nvml, nvml.nvmlDeviceGetPowerUsage, h)
    limit = _read(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, h)
    sm = _read(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
    sm_max = _read(nvml, nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM)
    reasons = _read(nvml, nvml.nvmlDeviceGetCurrentClocksEventReasons, h) if hasattr(
        nvml, "nvmlDeviceGetCurrentClocksEventReasons") else None
    procs = _read(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h) or []
    return {
        "index": index,
        "name": _text(_read(nvml, nvml.nvmlDeviceGetName, h)),
        "uuid": _text(_read(nvml, nvml.nvmlDeviceGetUUID, h)),
        "memory_total_mb": round(mem.total / 2**20) if mem else None,
        "memory_used_mb": round(mem.used / 2**20) if mem else None,
        "utilization_gpu": util.gpu if util else None,
        "utilization_memory": util.memory if util else None,
        "temperature_c": _read(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
        "power_w": round(power / 1000, 1) if power is not None else None,
        "power_limit_w": round(limit / 1000, 1) if limit is not None else None,
        "sm_clock_mhz": sm,
        "sm_clock_max_mhz": sm_max,
        "clock_event_reasons": reasons,
        "processes": [{"pid": p.pid, "used_mb": round(p.usedGpuMemory / 2**20) if p.usedGpuMemory else None}
                      for p in procs],
    }


def nvml_devices(module: Any | None = None) -> list[dict[str, Any]]:
    """Every GPU NVML sees; raises NvmlUnavailable with the reason when it cannot be used.

    `module` is pynvml, or a constructed stand-in in tests.
    """
    nvml: Any = module
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError:
            raise NvmlUnavailable("nvidia-ml-py is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML unavailable: {err}") from None
    try:
        return [describe_device(nvml, i) for i in range(nvml.nvmlDeviceGetCount())]
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


@register
class GpuDevices(Probe):
    id = "gpu.devices"
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
