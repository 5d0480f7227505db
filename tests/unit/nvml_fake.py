"""A constructed stand-in for pynvml: the functions fieldguide calls, with readings a test sets.

Shaped like nvidia-ml-py 12.x: handles by index, structs with the same field names, NVMLError
subclasses raised for what a device does not support. Nothing here needs a GPU.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any


class FakeNVMLError(Exception):
    pass


class NotSupported(FakeNVMLError):
    def __str__(self) -> str:
        return "Not Supported"


class NotFound(FakeNVMLError):
    def __str__(self) -> str:
        return "Not Found"


@dataclass
class FakeGpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-aaaa"
    util: list[tuple[int, int]] = field(default_factory=lambda: [(1, 30), (2, 35), (3, 25)])  # (ts µs, %)
    processes: dict[int, int] = field(default_factory=dict)  # pid -> used bytes
    process_sm: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (sm %, mem %)
    reasons: int = 0
    sm_clock: int = 1980
    sm_clock_max: int = 1980
    power_mw: int = 300_000
    power_limit_mw: int = 700_000
    temperature: int = 50
    pcie_kbs: tuple[int, int] = (1024, 4096)  # tx, rx
    gpm: dict[int, float] | None = None  # metric id -> value; None: no GPM on this part
    ecc_uncorrected: int = 0
    retired_pending: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corrected, uncorrected, pending, failed
    pcie: tuple[int, int, int, int, int] = (5, 5, 5, 16, 16)  # gen, gen max (GPU and slot), GPU gen max, width, width max
    persistence: int = 1
    mig: tuple[int, int] = (0, 0)
    unsupported: set[str] = field(default_factory=set)


def fake_pynvml(gpus: list[FakeGpu], *, init_error: str | None = None) -> types.SimpleNamespace:
    m = types.SimpleNamespace(NVMLError=FakeNVMLError, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0,
                              NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1, calls=[])

    def gpu(handle: Any) -> FakeGpu:
        return gpus[handle[1]]

    def reading(name: str, read: Any) -> Any:
        def call(handle: Any, *args: Any) -> Any:
            m.calls.append(name)
            if name in gpu(handle).unsupported:
                raise NotSupported()
            return read(gpu(handle), *args)
        return call

    def init() -> None:
        m.calls.append("nvmlInit")
        if init_error:
            raise FakeNVMLError(init_error)

    m.nvmlInit = init
    m.nvmlShutdown = lambda: m.calls.append("nvmlShutdown")
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    m.nvmlDeviceGetName = reading("name", lambda g: g.name.encode())
    m.nvmlDeviceGetUUID = reading("uuid", lambda g: g.uuid)
    m.nvmlDeviceGetMemoryInfo = reading("memory", lambda g: types.SimpleNamespace(
        total=141 * 2**30, used=sum(g.processes.values()), free=0))
    m.nvmlDeviceGetUtilizationRates = reading("utilization", lambda g: types.SimpleNamespace(
        gpu=g.util[-1][1] if g.util else 0, memory=10))
    m.nvmlDeviceGetPowerUsage = reading("power", lambda g: g.power_mw)
    m.nvmlDeviceGetEnforcedPowerLimit = reading("power_limit", lambda g: g.power_limit_mw)
    m.nvmlDeviceGetClockInfo = reading("clock", lambda g, kind: g.sm_clock)
    m.nvmlDeviceGetMaxClockInfo = reading("clock_max", lambda g, kind: g.sm_clock_max)
    m.nvmlDeviceGetCurrentClocksEventReasons = reading("reasons", lambda g: g.reasons)
    m.nvmlDeviceGetTemperature = reading("temperature", lambda g, kind: g.temperature)
    m.nvmlDeviceGetComputeRunningProcesses = reading("processes", lambda g: [
        types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in g.processes.items()])
    m.nvmlDeviceGetPcieThroughput = reading("pcie", lambda g, kind: g.pcie_kbs[kind])
    m.nvmlDeviceGetTotalEccErrors = reading("ecc", lambda g, kind, counter: g.ecc_uncorrected)
    m.nvmlDeviceGetRetiredPagesPendingStatus = reading("retired", lambda g: g.retired_pending)
    m.nvmlDeviceGetRemappedRows = reading("remapped", lambda g: g.remapped_rows)
    m.nvmlDeviceGetCurrPcieLinkGeneration = reading("pcie_gen", lambda g: g.pcie[0])
    m.nvmlDeviceGetMaxPcieLinkGeneration = reading("pcie_gen_max", lambda g: g.pcie[1])
    m.nvmlDeviceGetGpuMaxPcieLinkGeneration = reading("pcie_gen_gpu_max", lambda g: g.pcie[2])
    m.nvmlDeviceGetCurrPcieLinkWidth = reading("pcie_width", lambda g: g.pcie[3])
    m.nvmlDeviceGetMaxPcieLinkWidth = reading("pcie_width_max", lambda g: g.pcie[4])
    m.nvmlDeviceGetPersistenceMode = reading("persistence", lambda g: g.persistence)
    m.nvmlDeviceGetMigMode = reading("mig", lambda g: g.mig)

    def samples(g: FakeGpu, kind: int, since: int) -> Any:
        values = [types.SimpleNamespace(timeStamp=ts, sampleValue=types.SimpleNamespace(uiVal=v))
                  for ts, v in g.util if ts > since]
        return 1, values

    m.nvmlDeviceGetSamples = reading("samples", lambda g, kind, since: samples(g, kind, 0))

    def process_util(g: FakeGpu, since: int) -> Any:
        if not g.process_sm:
            raise NotFound()
        return [types.SimpleNamespace(pid=pid, timeStamp=1, smUtil=sm, memUtil=mem, encUtil=0, decUtil=0)
                for pid, (sm, mem) in g.process_sm.items()]

    m.nvmlDeviceGetProcessUtilization = reading("process_utilization", process_util)
    m.nvmlGpmQueryDeviceSupport = reading("gpm", lambda g: types.SimpleNamespace(isSupportedDevice=g.gpm is not None))
    m.nvmlGpmSampleAlloc = lambda: types.SimpleNamespace(taken=[])
    m.nvmlGpmSampleFree = lambda sample: None

    def sample_get(handle: Any, sample: Any) -> None:
        sample.gpu = gpu(handle)

    m.nvmlGpmSampleGet = sample_get

    class Metric:
        def __init__(self) -> None:
            self.metricId = 0
            self.value = 0.0

    class MetricsGet:
        def __init__(self) -> None:
            self.metrics = [Metric() for _ in range(10)]

    def metrics_get(request: Any) -> None:
        values = request.sample2.gpu.gpm or {}
        for metric in request.metrics[:request.numMetrics]:
            metric.value = values.get(metric.metricId, 0.0)

    m.c_nvmlGpmMetricsGet_t = MetricsGet
    m.nvmlGpmMetricsGet = metrics_get
    return m
