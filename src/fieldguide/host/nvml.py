"""The one NVML reader of fieldguide (nvidia-ml-py): devices, their processes, and windows of samples.

pynvml is imported only when a reader opens. A reading a device does not support (NotSupported
and NoPermission vary by SKU and VM) is a `Reading` with no value and its reason, like
nvitop's N/A: never an invented number, never an exception. No library, no driver or no GPU
is `NvmlUnavailable` with the reason for the user. Every call site passes the module in tests:
a constructed stand-in with the same function names (tests/unit/nvml_fake.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# nvmlClocksEventReason* bits (the throttle reasons). GPU idle is not throttling: a device with
# nothing to run lowers its clocks, and that is the absence of work, not a limit on it.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
GPU_UTILIZATION_SAMPLES = 1
# GPM metric ids (Hopper-class parts): real SM activity, occupancy, tensor-core and DRAM activity.
GPM_METRICS = {"sm_active": 2, "sm_occupancy": 3, "tensor_active": 5, "dram_bw": 10}


class NvmlUnavailable(Exception):
    """NVML cannot be used here; str() is the reason for the user."""


@dataclass(frozen=True)
class Reading:
    """A value, or None with why (not supported on this device, no permission, ...)."""

    value: Any = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None


def text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def error_text(err: BaseException) -> str:
    """An NVML error in words (pynvml's own __str__ fails on an error built with a message)."""
    try:
        return str(err) or type(err).__name__
    except Exception:
        return " ".join(str(a) for a in err.args) or type(err).__name__


def reason_names(mask: int | None) -> list[str]:
    if mask is None:
        return []
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


class Nvml:
    """An initialised NVML: open with `Nvml.open()` (or `with nvml_session() as nvml`), close after."""

    def __init__(self, module: Any) -> None:
        self.m = module

    @classmethod
    def open(cls, module: Any | None = None) -> Nvml:
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
            raise NvmlUnavailable(f"NVML unavailable: {error_text(err)}") from None
        return cls(nvml)

    def close(self) -> None:
        try:
            self.m.nvmlShutdown()
        except Exception:
            pass

    def read(self, fn: Callable[..., Any] | str, *args: Any) -> Reading:
        """One call, its NVML error turned into the reason (a function this driver lacks included)."""
        call = getattr(self.m, fn, None) if isinstance(fn, str) else fn
        if call is None:
            return Reading(reason=f"{fn} is not in this nvidia-ml-py")
        try:
            return Reading(call(*args))
        except self.m.NVMLError as err:
            return Reading(reason=error_text(err))

    def count(self) -> int:
        return int(self.m.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self.m.nvmlDeviceGetHandleByIndex(index)

    # -- one device, now ------------------------------------------------------------------------
    def device(self, index: int) -> dict[str, Any]:
        """A device's identity and current state (None where it cannot be read, with `unsupported`)."""
        m, h = self.m, self.handle(index)
        unsupported: dict[str, str] = {}
        value = self._values_of(h, unsupported)
        mem = value("memory", "nvmlDeviceGetMemoryInfo")
        util = value("utilization", "nvmlDeviceGetUtilizationRates")
        power = value("power_w", "nvmlDeviceGetPowerUsage")
        limit = value("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        reasons = value("clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons")
        procs = value("processes", "nvmlDeviceGetComputeRunningProcesses") or []
        return {
            "index": index,
            "name": text(value("name", "nvmlDeviceGetName")),
            "uuid": text(value("uuid", "nvmlDeviceGetUUID")),
            "memory_total_mb": round(mem.total / 2**20) if mem else None,
            "memory_used_mb": round(mem.used / 2**20) if mem else None,
            "utilization_gpu": util.gpu if util else None,
            "utilization_memory": util.memory if util else None,
            "temperature_c": value("temperature_c", "nvmlDeviceGetTemperature", m.NVML_TEMPERATURE_GPU),
            "power_w": round(power / 1000, 1) if power is not None else None,
            "power_limit_w": round(limit / 1000, 1) if limit is not None else None,
            "sm_clock_mhz": value("sm_clock_mhz", "nvmlDeviceGetClockInfo", m.NVML_CLOCK_SM),
            "sm_clock_max_mhz": value("sm_clock_max_mhz", "nvmlDeviceGetMaxClockInfo", m.NVML_CLOCK_SM),
            "clock_event_reasons": reasons,
            "throttle_reasons": [r for r in reason_names(reasons) if r in THROTTLING],
            "processes": [{"pid": p.pid, "used_mb": round(p.usedGpuMemory / 2**20) if p.usedGpuMemory else None}
                          for p in procs],
            "unsupported": unsupported,
        }

    def health(self, index: int) -> dict[str, Any]:
        """What makes a GPU unfit to train on, now (node-check): uncorrected ECC errors, retired
        pages or remapped rows pending or failed, the PCIe link below the part's own maximum,
        persistence mode, MIG. None where the device cannot tell (`unsupported` says why)."""
        m, h = self.m, self.handle(index)
        unsupported: dict[str, str] = {}
        value = self._values_of(h, unsupported)
        remapped = value("remapped_rows", "nvmlDeviceGetRemappedRows")  # (corrected, uncorrected, pending, failed)
        mig = value("mig_mode", "nvmlDeviceGetMigMode")  # (current, pending)
        return {
            "index": index,
            "ecc_uncorrected": value("ecc_uncorrected", "nvmlDeviceGetTotalEccErrors",
                                     getattr(m, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                     getattr(m, "NVML_VOLATILE_ECC", 0)),
            "retired_pages_pending": value("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus"),
            "remap_pending": bool(remapped[2]) if remapped else None,
            "remap_failed": bool(remapped[3]) if remapped else None,
            "pcie_gen": value("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
            "pcie_gen_max": value("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),  # the GPU's and the slot's
            "pcie_gen_gpu_max": value("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
            "pcie_width": value("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
            "pcie_width_max": value("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
            "persistence_mode": value("persistence_mode", "nvmlDeviceGetPersistenceMode"),
            "mig_mode": mig[0] if mig else None,
            "unsupported": unsupported,
        }

    def _values_of(self, handle: Any, unsupported: dict[str, str]) -> Callable[..., Any]:
        """value(name, fn, *args): one reading of the device, None where it cannot tell, and
        why noted under `name` in `unsupported`."""

        def value(name: str, fn: str, *args: Any) -> Any:
            got = self.read(fn, handle, *args)
            if not got.ok:
                unsupported[name] = str(got.reason)
            return got.value

        return value

    def devices(self) -> list[dict[str, Any]]:
        return [self.device(i) for i in range(self.count())]

    def compute_pids(self, index: int) -> dict[int, int | None]:
        """pid -> used bytes of every compute (and graphics) process on a device."""
        h = self.handle(index)
        found: dict[int, int | None] = {}
        for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for proc in self.read(fn, h).value or []:
                found[int(proc.pid)] = proc.usedGpuMemory
        return found

    def utilization_samples(self, index: int, since_us: int) -> Reading:
        """The driver's buffer of GPU-utilization samples newer than `since_us`: [(timestamp µs, %)]."""
        got = self.read("nvmlDeviceGetSamples", self.handle(index), GPU_UTILIZATION_SAMPLES, since_us)
        if not got.ok:
            return got
        _, samples = got.value
        return Reading([(int(s.timeStamp), float(s.sampleValue.uiVal)) for s in samples])

    def process_utilization(self, index: int, since_us: int) -> Reading:
        """pid -> (SM %, memory %) over samples newer than `since_us` (NotFound: none newer)."""
        got = self.read("nvmlDeviceGetProcessUtilization", self.handle(index), since_us)
        if not got.ok:
            if "Not Found" in str(got.reason) or "NotFound" in str(got.reason):
                return Reading({})
            return got
        by_pid: dict[int, tuple[float, float]] = {}
        for s in got.value:
            sm, mem = by_pid.get(int(s.pid), (0.0, 0.0))
            by_pid[int(s.pid)] = (max(sm, float(s.smUtil)), max(mem, float(s.memUtil)))
        return Reading(by_pid)

    def pcie_kbs(self, index: int) -> tuple[Reading, Reading]:
        h = self.handle(index)
        return (self.read("nvmlDeviceGetPcieThroughput", h, getattr(self.m, "NVML_PCIE_UTIL_TX_BYTES", 0)),
                self.read("nvmlDeviceGetPcieThroughput", h, getattr(self.m, "NVML_PCIE_UTIL_RX_BYTES", 1)))

    # -- GPM (Hopper and later) -------------------------------------------------------------------
    def gpm_begin(self, index: int) -> Reading:
        """A first GPM sample (None with the reason on a device without GPM)."""
        h = self.handle(index)
        supported = self.read("nvmlGpmQueryDeviceSupport", h)
        if not supported.ok:
            return supported
        if not getattr(supported.value, "isSupportedDevice", False):
            return Reading(reason="this GPU has no GPM (SM activity needs a Hopper-class part or later)")
        sample = self.read("nvmlGpmSampleAlloc")
        if not sample.ok:
            return sample
        got = self.read("nvmlGpmSampleGet", h, sample.value)
        return Reading((h, sample.value)) if got.ok else got

    def gpm_end(self, begun: Reading) -> Reading:
        """{sm_active, sm_occupancy, tensor_active, dram_bw} in percent between the two samples."""
        if not begun.ok:
            return begun
        h, first = begun.value
        second = self.read("nvmlGpmSampleAlloc")
        if not second.ok:
            return second
        try:
            got = self.read("nvmlGpmSampleGet", h, second.value)
            if not got.ok:
                return got
            request = self.m.c_nvmlGpmMetricsGet_t()
            request.version = getattr(self.m, "NVML_GPM_METRICS_GET_VERSION", 1)
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = first, second.value
            for i, metric in enumerate(GPM_METRICS.values()):
                request.metrics[i].metricId = metric
            done = self.read("nvmlGpmMetricsGet", request)
            if not done.ok:
                return done
            return Reading({name: float(request.metrics[i].value) for i, name in enumerate(GPM_METRICS)})
        finally:
            for sample in (first, second.value):
                self.read("nvmlGpmSampleFree", sample)


@contextmanager
def nvml_session(module: Any | None = None) -> Iterator[Nvml]:
    nvml = Nvml.open(module)
    try:
        yield nvml
    finally:
        nvml.close()


def nvml_devices(module: Any | None = None) -> list[dict[str, Any]]:
    """Every GPU NVML sees; raises NvmlUnavailable with the reason when it cannot be used."""
    with nvml_session(module) as nvml:
        return nvml.devices()


def now_us() -> int:
    return int(time.time() * 1e6)
