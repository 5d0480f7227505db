"""The GPU paths on constructed NVML and CUDA data: which GPUs are the job's, what a window of
samples adds up to, what a device cannot report, and the CUDA capability's arithmetic."""

from __future__ import annotations

import traceback
from typing import Any

import pytest
from nvml_fake import FakeGpu, fake_pynvml

from fieldguide.agent.inside.capabilities.cuda import user_site
from fieldguide.analysis.optrace import DeviceActivity
from fieldguide.host.gpuwindow import job_devices, sample_window, summarize
from fieldguide.host.nvml import GPM_METRICS, Nvml, NvmlUnavailable, nvml_devices, reason_names
from fieldguide.probes.cuda import step_times

JOB = 4242


def open_fake(*gpus: FakeGpu) -> Nvml:
    return Nvml.open(fake_pynvml(list(gpus)))


def test_the_jobs_gpu_is_where_its_process_holds_a_context() -> None:
    nvml = open_fake(FakeGpu(processes={111: 2**30}), FakeGpu(uuid="GPU-bbbb", processes={JOB: 2**30}))
    assert job_devices(nvml, {JOB}, "0,1") == ([1], "the job's processes hold a CUDA context there (NVML process list)")


def test_without_a_context_cuda_visible_devices_names_the_gpus() -> None:
    nvml = open_fake(FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb"), FakeGpu(uuid="GPU-cccc"))
    assert job_devices(nvml, {JOB}, "2")[0] == [2]
    assert job_devices(nvml, {JOB}, "GPU-bbbb")[0] == [1]  # by UUID (a prefix is enough)
    hidden, how = job_devices(nvml, {JOB}, "-1")
    assert hidden == [] and "hides every GPU" in how
    assert job_devices(nvml, {JOB}, None)[0] == [0, 1, 2]


def test_a_window_reads_the_drivers_samples_and_tells_the_job_from_others() -> None:
    gpu = FakeGpu(util=[(1, 30), (2, 34), (3, 32)], processes={JOB: 8 * 2**30, 999: 20 * 2**30},
                  process_sm={JOB: (25, 10), 999: (40, 30)}, gpm={2: 8.0, 3: 12.0, 5: 1.5, 10: 20.0})
    nvml = open_fake(gpu)
    values, missing = summarize(sample_window(nvml, [0], {JOB}, seconds=0), {JOB})
    assert values["gpu_util_median"] == 32.0
    assert values["per_device"][0]["processes"] == [
        {"pid": 999, "job": False, "memory_mb": 20480.0, "sm_util_max": 40.0},
        {"pid": JOB, "job": True, "memory_mb": 8192.0, "sm_util_max": 25.0}]
    assert values["job_sm_util"] == 25.0 and values["others_sm_util"] == 40.0
    assert values["job_memory_mb"] == 8192 and values["others_memory_mb"] == 20480
    # "GPU-Util 32% while SMs are 8% active": GPM's real activity, which nvidia-smi cannot give.
    assert values["sm_active"] == 8.0 and values["tensor_active"] == 1.5
    assert values["pcie_rx_mb_s"] == 4.0 and values["pcie_tx_mb_s"] == 1.0
    assert not missing


def test_throttling_is_named_and_gpu_idle_is_not_throttling() -> None:
    assert reason_names(0x1 | 0x4) == ["gpu_idle", "sw_power_cap"]
    idle, _ = summarize(sample_window(open_fake(FakeGpu(reasons=0x1)), [0], {JOB}, seconds=0))
    assert idle["throttled_fraction"] == 0.0 and idle["throttle_reasons"] == "none"
    capped, _ = summarize(sample_window(open_fake(FakeGpu(reasons=0x4 | 0x40, sm_clock=990)), [0], {JOB}, seconds=0))
    assert capped["throttled_fraction"] == 1.0
    assert capped["throttle_reasons"] == "hw_thermal_slowdown, sw_power_cap"
    assert capped["clock_fraction"] == 0.5


def test_what_a_device_cannot_report_is_missing_with_the_reason_never_invented() -> None:
    gpu = FakeGpu(gpm=None, unsupported={"pcie", "power"})
    values, missing = summarize(sample_window(open_fake(gpu), [0], {JOB}, seconds=0))
    assert values["sm_active"] is None and "no GPM" in missing["sm_active"]
    assert values["pcie_rx_mb_s"] is None and missing["pcie_rx_mb_s"] == "Not Supported"
    assert values["power_fraction"] is None
    assert values["gpu_util_median"] == 30.0  # the rest is still read
    # NVML's NotFound: no process ran kernels since the window began, so each got 0% of the SMs.
    assert values["job_sm_util"] == 0.0 and values["others_sm_util"] == 0.0
    unsupported = FakeGpu(unsupported={"process_utilization"})
    values, missing = summarize(sample_window(open_fake(unsupported), [0], {JOB}, seconds=0))
    assert values["others_sm_util"] is None and missing["others_sm_util"] == "Not Supported"


def test_nvml_that_cannot_start_is_one_reason() -> None:
    with pytest.raises(NvmlUnavailable, match="NVML unavailable: Driver Not Loaded"):
        nvml_devices(fake_pynvml([], init_error="Driver Not Loaded"))
    nvml = open_fake(FakeGpu())
    assert nvml.read("nvmlDeviceGetNoSuchThing", nvml.handle(0)).reason == \
        "nvmlDeviceGetNoSuchThing is not in this nvidia-ml-py"


def test_gpm_metric_ids_are_nvmls() -> None:
    assert GPM_METRICS == {"sm_active": 2, "sm_occupancy": 3, "tensor_active": 5, "dram_bw": 10}


def test_device_activity_counts_kernels_and_pageable_copies() -> None:
    activity = DeviceActivity()
    for _ in range(5):
        activity.add("Memcpy HtoD (Pageable -> Device)", 2000.0)
        activity.add("Memcpy HtoD (Pinned -> Device)", 100.0)
        activity.add("Memset (Device)", 5.0)
        for _ in range(40):
            activity.add("void at::native::vectorized_elementwise_kernel<4, ...>", 3.0)
    summary = activity.summary(steps=5, wall=0.1)
    assert summary["kernels_per_step"] == 40 and summary["median_kernel_us"] == 3.0
    assert summary["h2d_pageable_per_step"] == 1.0
    assert summary["h2d_pageable_fraction"] == pytest.approx(0.1)  # 10 ms of 100 ms
    assert summary["kernel_busy_fraction"] == pytest.approx(600 / 100_000)
    assert DeviceActivity().summary(5, 0.1) == {}  # no CUDA activity: nothing claimed


def test_device_time_beside_host_time_leaves_out_the_first_steps() -> None:
    # A loop that queues work faster than the device runs it: host 9.5 ms, device 16.1 ms.
    values = step_times([40.0, 30.0, *[16.1] * 10], [5.0, 6.0, *[9.5] * 10])
    assert values["device_step_ms_median"] == 16.1 and values["host_step_ms_median"] == 9.5
    assert values["host_ahead_fraction"] == pytest.approx(0.41, abs=0.01)


def test_a_sync_is_placed_at_the_jobs_own_line() -> None:
    stack = [traceback.FrameSummary("/home/u/train.py", 57, "main"),
             traceback.FrameSummary("/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", 1000, "item"),
             traceback.FrameSummary("/usr/lib/python3.11/warnings.py", 10, "warn")]
    assert user_site(stack) == "train.py:57 in main"


def test_the_loops_step_time_on_a_gpu_is_the_devices() -> None:
    from fieldguide.agent.channel import AgentReply
    from fieldguide.probes.loop import Background, LoopSteps

    values: dict = {}
    missing: dict = {}
    reply = AgentReply(True, {"device_ms": [30.0, 20.0, *[16.1] * 8], "host_ms": [5.0, 5.0, *[9.5] * 8]})
    LoopSteps._add_device_time(Background("t", lambda: reply), values, missing)
    assert values == {"device_step_ms_median": 16.1, "device_step_ms_p90": 16.1} and not missing
    values, missing = {}, {}
    failed = AgentReply(False, error="the job has not initialised CUDA (...)")
    LoopSteps._add_device_time(Background("t", lambda: failed), values, missing)
    assert not values and "not initialised CUDA" in missing["device_step_ms_median"]


class _PeakAgent:
    """What the cuda capability uses of the agent: torch, step listeners, replies."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.listeners: list[Any] = []
        self.replies: list[tuple[str, Any, Any]] = []

    def add_step_listener(self, capability: Any) -> None:
        self.listeners.append(capability)

    def remove_step_listener(self, capability: Any) -> None:
        self.listeners.remove(capability)

    def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self.replies.append(("ok", request_id, result))

    def fail(self, request_id: Any, error: str) -> None:
        self.replies.append(("fail", request_id, error))


def _fake_torch(initialized: bool, device: int = 3) -> Any:
    from types import SimpleNamespace

    cuda = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: initialized,
                           current_device=lambda: device, max_memory_allocated=lambda: 3 * 2**30,
                           max_memory_reserved=lambda: 4 * 2**30)
    return SimpleNamespace(cuda=cuda)


def test_the_cuda_peak_is_read_at_the_next_step_on_the_training_thread_and_nothing_is_reset() -> None:
    from fieldguide.agent.inside.capabilities.cuda import CudaWatch

    agent = _PeakAgent(_fake_torch(initialized=True))
    watch = CudaWatch(agent)  # type: ignore[arg-type]
    watch.start()
    watch.on_request("peak", 9, {})
    assert agent.replies == [] and agent.listeners == [watch]  # answered at a step boundary, not on our thread
    watch.on_step()
    assert agent.replies == [("ok", 9, {"device": 3, "max_allocated": 3 * 2**30, "max_reserved": 4 * 2**30})]
    assert agent.listeners == []


def test_a_job_without_cuda_gets_no_peak_but_the_reason() -> None:
    from fieldguide.agent.inside.capabilities.cuda import CudaWatch

    agent = _PeakAgent(_fake_torch(initialized=False))
    watch = CudaWatch(agent)  # type: ignore[arg-type]
    watch.start()
    watch.on_request("peak", 4, {})
    assert agent.replies == [("fail", 4, "the job has not initialised CUDA (no work on a GPU to measure)")]
