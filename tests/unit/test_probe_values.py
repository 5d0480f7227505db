"""The pure parts of probes and targets, on constructed data: loop, process, torch version, NVML, ptrace, py-spy."""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

from fieldguide.analysis.stats import median, quantile
from fieldguide.errors import BadInput
from fieldguide.host.access import CAP_SYS_PTRACE, classify_py_spy_failure, ptrace_denial
from fieldguide.measurement import Measurement
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.env import parse_torch_version_file
from fieldguide.probes.gpu import NvmlUnavailable, describe_device, nvml_devices
from fieldguide.probes.loop import LoopSteps, loop_values
from fieldguide.probes.process import interval_cores, process_values

# --- stats ---------------------------------------------------------------------------------------------

def test_quantile_and_median():
    assert quantile([], 0.5) is None and median([]) is None
    assert median([3.0]) == 3.0
    assert median([4, 1, 3, 2]) == 2.5
    assert quantile([0, 10], 0.9) == pytest.approx(9.0)
    assert quantile([5, 1, 3], 0.0) == 1 and quantile([5, 1, 3], 1.0) == 5


# --- loop_values ---------------------------------------------------------------------------------------

# [t_end, wall_s, data_wait_s, boundary]; rows 0-2 are warm-up, row 9 ends after the window.
STEPS = [
    [10.0, 0.9, 0.5, "o"],
    [11.0, 0.8, 0.4, "o"],
    [12.0, 0.7, 0.6, "o"],   # inside the window, but a warm-up step
    [13.0, 0.1, 0.02, "o"],
    [14.0, 0.1, 0.02, "o"],
    [15.0, 0.2, 0.1, "o"],
    [16.0, 0.1, 0.01, "o"],
    [17.0, 0.1, 0.01, "o"],
    [18.0, 0.3, 0.2, "o"],
    [19.0, 5.0, 5.0, "o"],   # after the window
]
ITERS = [
    {"t_start": 11.0, "first_batch_s": 0.5},     # before the window (and before the look-back of one step)
    {"t_start": 11.45, "first_batch_s": 0.03},   # inside the look-back: the first in-window step began at 11.4
    {"t_start": 12.9, "first_batch_s": 0.15},
    {"t_start": 16.0, "first_batch_s": 0.12},
    {"t_start": 19.5, "first_batch_s": 2.0},     # after the window
]


def test_loop_values_over_the_window_without_warmup():
    assert LoopSteps.params["warmup_steps"] == 3
    v, _ = loop_values(STEPS, ITERS, window_start=11.5, window_end=18.5, steps_before=0)
    assert v["steps"] == 6
    assert v["boundary"] == "optimizer.step"
    assert v["step_ms_median"] == pytest.approx(100.0)
    assert v["step_ms_p90"] == pytest.approx(250.0)
    assert v["data_wait_ms_median"] == pytest.approx(20.0)
    assert v["data_wait_ms_p90"] == pytest.approx(150.0)
    assert v["data_wait_fraction"] == pytest.approx(0.36 / 0.9)
    assert v["steps_per_second"] == pytest.approx(6 / 0.9)
    assert v["epoch_starts"] == 3
    assert v["first_batch_ms_median"] == pytest.approx(120.0)
    assert v["startup_wait_fraction"] == pytest.approx(0.30 / 0.9)


def test_loop_values_counts_steps_before_for_warmup():
    v, _ = loop_values(STEPS, [], window_start=11.5, window_end=18.5, steps_before=3)
    assert v["steps"] == 7  # row 2 is no longer a warm-up step
    assert v["data_wait_fraction"] == pytest.approx((0.6 + 0.36) / 1.6)
    assert v["epoch_starts"] == 0 and v["first_batch_ms_median"] is None
    assert v["startup_wait_fraction"] == 0.0


def test_loop_values_wait_is_capped_at_the_step_and_boundary_from_the_last_row():
    steps = [[float(i), 0.1, 0.5 if i == 5 else 0.05, "b"] for i in range(3, 8)]
    v, _ = loop_values(steps, [], 0.0, 100.0, steps_before=10)
    assert v["steps"] == 5
    assert v["boundary"] == "DataLoader batch"
    assert v["data_wait_fraction"] == pytest.approx((0.05 * 4 + 0.1) / 0.5)


def test_a_loader_kept_off_the_cores_by_a_busy_machine_is_cpu_work_not_a_wait():
    """Main-process loading, 60 ms in __next__ a step, 27 ms of it on the CPU: alone that reads as
    waiting (45%); with the training thread runnable but waiting for a core half the window (a
    neighbour's workers fill the cores), it is CPU work starved of cores (90%), as py-spy reads a
    runnable thread from outside. A loader that sleeps is hardly touched by the correction."""
    from fieldguide.agent.inside.rows import StepRow

    def rows(wait: float, cpu: float) -> list[StepRow]:
        return [StepRow(float(i), 0.07, wait, "o", 0.061, 0.03, cpu, 1, 0, 1, 0.0, 32) for i in range(1, 12)]

    alone, _ = loop_values(rows(0.06, 0.027), [], 0.0, 100.0, steps_before=10)
    starved, _ = loop_values(rows(0.06, 0.027), [], 0.0, 100.0, steps_before=10, run_queue_share=0.5)
    assert alone["producer_cpu_fraction"] == pytest.approx(0.45)
    assert starved["producer_cpu_fraction"] == pytest.approx(0.9)
    sleeping, _ = loop_values(rows(0.06, 0.003), [], 0.0, 100.0, steps_before=10, run_queue_share=0.08)
    assert sleeping["producer_cpu_fraction"] == pytest.approx(0.054, abs=0.001)


def test_loop_values_startup_fraction_is_capped_at_one():
    steps = [[float(i), 0.1, 0.05, "o"] for i in range(10)]
    iters = [{"t_start": 5.0, "first_batch_s": 30.0}]
    v, _ = loop_values(steps, iters, 0.0, 100.0, steps_before=10)
    assert v["startup_wait_fraction"] == 1.0
    assert v["first_batch_ms_median"] == pytest.approx(30000.0)


def test_loop_values_empty_window():
    v, _ = loop_values(STEPS, ITERS, window_start=100.0, window_end=200.0, steps_before=0)
    assert v["steps"] == 0
    assert v["boundary"] is None
    for name in ("step_ms_median", "step_ms_p90", "data_wait_ms_median", "data_wait_fraction", "steps_per_second",
                 "startup_wait_fraction", "first_batch_ms_median"):
        assert v[name] is None, name
    assert v["epoch_starts"] == 0


# --- process_values ------------------------------------------------------------------------------------

def snap(cpu: float, vol: int = 0, invol: int = 0, rss: int = 0) -> dict[str, Any]:
    return {"cpu": cpu, "rss": rss, "vol": vol, "invol": invol, "created": 0.0}


def test_process_values_cores_from_cpu_second_deltas():
    first = {100: snap(10.0, 100, 10), 101: snap(2.0, 50, 5), 102: snap(0.0)}  # 102 born in the window
    last = {100: snap(14.0, 180, 30), 101: snap(5.0, 90, 5), 102: snap(1.0, 20, 0)}
    v = process_values(first, last, root_pid=100, seconds=4.0, cores=8, rss_series=[1000.0, 1010.0, 1030.0],
                       spawned=1)
    assert v == {
        "usable_cores": 8,
        "main_cpu_cores": 1.0,
        "worker_count": 2,
        "worker_cpu_cores": 1.0,
        "worker_cores_mean": 0.5,
        "tree_cpu_fraction": 0.25,
        "voluntary_switch_share": 0.875,
        "rss_mb": 1030.0,
        "rss_growth_mb_per_min": 450.0,
        "workers_spawned": 1,
    }


def test_process_values_a_pid_missing_from_first_counts_from_zero():
    v = process_values({100: snap(1.0)}, {100: snap(2.0), 101: snap(3.0)}, 100, 2.0, 4, [], 0)
    # One worker using 1.5 cores: a mean in cores, which may pass 1 (it was once misnamed a fraction).
    assert v["worker_cpu_cores"] == 1.5 and v["worker_cores_mean"] == 1.5


def test_process_values_without_workers():
    v = process_values({100: snap(3.0, 10, 10)}, {100: snap(5.0, 10, 10)}, 100, 2.0, 4, [512.0], 0)
    assert v["worker_count"] == 0
    assert v["worker_cores_mean"] is None
    assert v["worker_cpu_cores"] == 0.0
    assert v["main_cpu_cores"] == 1.0
    assert v["tree_cpu_fraction"] == 0.25
    assert v["voluntary_switch_share"] is None  # no switches in the window
    assert v["rss_mb"] == 512.0
    assert v["rss_growth_mb_per_min"] is None  # one RSS reading is no growth rate


def test_process_values_saturated_tree_and_negative_deltas():
    v = process_values({100: snap(9.0)}, {100: snap(5.0), 101: snap(40.0)}, 100, 2.0, 4, [100.0, 90.0], 0)
    assert v["main_cpu_cores"] == 0.0  # a CPU-time decrease (pid reuse) is clipped, not negative
    assert v["tree_cpu_fraction"] == 1.0
    assert v["rss_growth_mb_per_min"] == -300.0


def test_process_values_no_target():
    v = process_values({}, {}, 100, 1.0, 0, [], 0)
    assert v["main_cpu_cores"] == 0.0 and v["tree_cpu_fraction"] is None and v["rss_mb"] is None


def test_interval_cores_main_and_children_between_two_snapshots():
    prev = {100: snap(10.0), 101: snap(2.0)}
    now = {100: snap(10.5), 101: snap(2.25), 102: snap(0.25)}  # 102 was born since prev
    assert interval_cores(prev, now, 100, 0.5) == (1.0, 1.0)
    assert interval_cores(prev, {}, 100, 0.5) == (0.0, 0)  # the tree is gone
    assert interval_cores(prev, now, 100, 0.0) == (0.0, 0.0)


def test_every_fraction_process_cpu_returns_is_between_0_and_1():
    from fieldguide.probes.process import ProcessCpu

    # Oversubscribed: 3 workers each burning 1.5 cores on a 2-core box.
    first = {100: snap(0.0), 101: snap(0.0), 102: snap(0.0), 103: snap(0.0)}
    last = {100: snap(4.0, 1, 9), 101: snap(3.0), 102: snap(3.0), 103: snap(3.0)}
    v = process_values(first, last, 100, 2.0, 2, [10.0, 20.0], 0)
    for name, unit in ProcessCpu.values.items():
        if unit == "fraction" and v[name] is not None:
            assert 0.0 <= v[name] <= 1.0, (name, v[name])
    assert v["worker_cores_mean"] == 1.5


def test_process_cpu_streams_its_declared_series(monkeypatch):
    """The probe streams RSS and CPU as the series it declares, through Probe.reading."""
    import os
    import subprocess
    import sys
    import threading

    from fieldguide.probes.base import ProbeContext
    from fieldguide.probes.process import ProcessCpu

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    readings: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_reading(r: dict[str, Any]) -> None:
        with lock:
            readings.append(r)

    class Me:
        pid = os.getpid()
        agent = None

        def alive(self) -> bool:
            return True

        def gone_reason(self) -> str:
            return "gone"

    try:
        m = ProcessCpu().run(ProbeContext(target=Me(), on_reading=on_reading), seconds=0.6, interval=0.2)
    finally:
        child.kill()
        child.wait()
    assert m.ok and m.values["worker_count"] >= 1
    assert all(r["probe"] == "process.cpu" for r in readings)
    streamed = [r["series"] for r in readings if "series" in r]
    assert streamed, readings
    assert set(streamed[-1]) == set(ProcessCpu.series) == {"rss_mb", "main_cpu_cores", "worker_cpu_cores"}
    assert len(streamed[-1]["rss_mb"]) >= 2 and streamed[-1]["rss_mb"][-1] > 1.0
    assert all("elapsed" in r and "of" in r for r in readings)


# --- parse_torch_version_file --------------------------------------------------------------------------

CPU_VERSION_PY = """\
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.13.0+cpu'
debug = False
cuda: Optional[str] = None
git_version = 'cf30153c4c131c8164ee7798e5022d810682e2cb'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""


def test_parse_torch_version_file_cpu_build():
    assert parse_torch_version_file(CPU_VERSION_PY) == {"torch": "2.13.0+cpu", "cuda": None}


def test_parse_torch_version_file_cuda_build():
    text = CPU_VERSION_PY.replace("'2.13.0+cpu'", "'2.5.1+cu124'").replace("cuda: Optional[str] = None",
                                                                           "cuda: Optional[str] = '12.4'")
    assert parse_torch_version_file(text) == {"torch": "2.5.1+cu124", "cuda": "12.4"}


def test_parse_torch_version_file_old_style_assignments():
    text = "__version__ = \"2.1.0\"\ndebug = False\ncuda = '12.1'\ngit_version = 'abc'\n"
    assert parse_torch_version_file(text) == {"torch": "2.1.0", "cuda": "12.1"}


def test_parse_torch_version_file_without_versions():
    assert parse_torch_version_file("debug = False\n") == {"torch": None, "cuda": None}


# --- NVML with a constructed module ---------------------------------------------------------------------

class FakeNvmlError(Exception):
    """A pynvml-like error class of the fake module's own."""


def fake_nvml(error_cls: type[Exception] = FakeNvmlError, *, unsupported: tuple[str, ...] = (),
              init_error: str | None = None, count: int = 1, reasons: bool = True) -> types.SimpleNamespace:
    calls: list[str] = []
    m = types.SimpleNamespace(NVMLError=error_cls, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0, calls=calls)

    def fn(name: str, result: Any):
        def call(*args: Any) -> Any:
            calls.append(name)
            if name in unsupported:
                raise error_cls("Not Supported")
            return result(*args) if callable(result) else result
        return call

    def init() -> None:
        calls.append("nvmlInit")
        if init_error:
            raise error_cls(init_error)

    m.nvmlInit = init
    m.nvmlShutdown = fn("nvmlShutdown", None)
    m.nvmlDeviceGetCount = fn("nvmlDeviceGetCount", count)
    m.nvmlDeviceGetHandleByIndex = fn("nvmlDeviceGetHandleByIndex", lambda i: ("handle", i))
    m.nvmlDeviceGetMemoryInfo = fn("nvmlDeviceGetMemoryInfo",
                                   types.SimpleNamespace(total=80 * 2**30, used=1024 * 2**20, free=0))
    m.nvmlDeviceGetUtilizationRates = fn("nvmlDeviceGetUtilizationRates", types.SimpleNamespace(gpu=97, memory=40))
    m.nvmlDeviceGetPowerUsage = fn("nvmlDeviceGetPowerUsage", 250123)
    m.nvmlDeviceGetEnforcedPowerLimit = fn("nvmlDeviceGetEnforcedPowerLimit", 300000)
    m.nvmlDeviceGetClockInfo = fn("nvmlDeviceGetClockInfo", 1410)
    m.nvmlDeviceGetMaxClockInfo = fn("nvmlDeviceGetMaxClockInfo", 1980)
    if reasons:
        m.nvmlDeviceGetCurrentClocksEventReasons = fn("nvmlDeviceGetCurrentClocksEventReasons", 4)
    m.nvmlDeviceGetComputeRunningProcesses = fn("nvmlDeviceGetComputeRunningProcesses", [
        types.SimpleNamespace(pid=100, usedGpuMemory=2 * 2**30), types.SimpleNamespace(pid=200, usedGpuMemory=None)])
    m.nvmlDeviceGetName = fn("nvmlDeviceGetName", b"NVIDIA A100-SXM4-80GB")
    m.nvmlDeviceGetUUID = fn("nvmlDeviceGetUUID", "GPU-1234")
    m.nvmlDeviceGetTemperature = fn("nvmlDeviceGetTemperature", 65)
    return m


EXPECTED_DEVICE = {
    "index": 0, "name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-1234", "memory_total_mb": 81920,
    "memory_used_mb": 1024, "utilization_gpu": 97, "utilization_memory": 40, "temperature_c": 65,
    "power_w": 250.1, "power_limit_w": 300.0, "sm_clock_mhz": 1410, "sm_clock_max_mhz": 1980,
    "clock_event_reasons": 4, "throttle_reasons": ["sw_power_cap"],
    "processes": [{"pid": 100, "used_mb": 2048}, {"pid": 200, "used_mb": None}], "unsupported": {},
}


def test_describe_device_reads_every_field():
    assert describe_device(fake_nvml(), 0) == EXPECTED_DEVICE


def test_describe_device_without_the_clock_event_reasons_call():
    assert describe_device(fake_nvml(reasons=False), 0)["clock_event_reasons"] is None


def test_describe_device_unsupported_reading_with_pynvml_errors_is_none():
    pynvml = pytest.importorskip("pynvml")
    nvml = fake_nvml(pynvml.NVMLError, unsupported=("nvmlDeviceGetPowerUsage", "nvmlDeviceGetMemoryInfo"))
    device = describe_device(nvml, 0)
    assert device["power_w"] is None
    assert device["memory_total_mb"] is None and device["memory_used_mb"] is None
    assert device["utilization_gpu"] == 97  # the rest is still read


def test_describe_device_unsupported_reading_of_the_injected_module_is_none():
    nvml = fake_nvml(unsupported=("nvmlDeviceGetPowerUsage",))
    device = describe_device(nvml, 0)
    assert device["power_w"] is None
    assert device["power_limit_w"] == 300.0


def test_nvml_devices_lists_every_gpu_and_shuts_down():
    pynvml = pytest.importorskip("pynvml")
    nvml = fake_nvml(pynvml.NVMLError, count=2)
    devices = nvml_devices(nvml)
    assert [d["index"] for d in devices] == [0, 1]
    assert devices[1]["name"] == "NVIDIA A100-SXM4-80GB"
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


def test_nvml_devices_init_failure_is_nvml_unavailable_with_the_reason():
    nvml = fake_nvml(init_error="Driver Not Loaded")
    with pytest.raises(NvmlUnavailable) as info:
        nvml_devices(nvml)
    assert str(info.value) == "NVML unavailable: Driver Not Loaded"
    assert nvml.calls == ["nvmlInit"]


def test_nvml_devices_no_gpus():
    assert nvml_devices(fake_nvml(count=0)) == []


# --- ptrace_denial --------------------------------------------------------------------------------------

NO_CAPS = "0000000000000000"
WITH_PTRACE = f"{1 << CAP_SYS_PTRACE:016x}"  # 0000000000080000
DOCKER_ROOT = "00000000a80425fb"  # docker's default root set: no CAP_SYS_PTRACE
FULL_ROOT = "000001ffffffffff"


def test_cap_sys_ptrace_is_bit_19():
    assert CAP_SYS_PTRACE == 19 and WITH_PTRACE == "0000000000080000"


@pytest.mark.parametrize("caps", [NO_CAPS, WITH_PTRACE, DOCKER_ROOT])
def test_scope_0_allows(caps):
    assert ptrace_denial(caps, 0) is None


@pytest.mark.parametrize("caps", [NO_CAPS, DOCKER_ROOT])
def test_scope_1_without_cap_sys_ptrace_is_denied(caps):
    message = ptrace_denial(caps, 1)
    assert message is not None
    assert message.startswith("ptrace not permitted: kernel.yama.ptrace_scope is 1")
    assert "CAP_SYS_PTRACE" in message
    assert "launch mode" in message and "fieldguide diagnose -- CMD" in message
    assert "sysctl kernel.yama.ptrace_scope=0" in message


@pytest.mark.parametrize("caps", [WITH_PTRACE, FULL_ROOT])
@pytest.mark.parametrize("scope", [1, 2])
def test_cap_sys_ptrace_allows_scopes_1_and_2(caps, scope):
    assert ptrace_denial(caps, scope) is None


def test_scope_2_without_cap_is_denied():
    assert "ptrace_scope is 2" in ptrace_denial(NO_CAPS, 2)


@pytest.mark.parametrize("caps", [NO_CAPS, WITH_PTRACE, FULL_ROOT])
def test_scope_3_is_always_denied(caps):
    message = ptrace_denial(caps, 3)
    assert message is not None and "ptrace_scope is 3" in message and "launch mode" in message


# --- classify_py_spy_failure ----------------------------------------------------------------------------

def test_permission_denied_is_ptrace():
    err = classify_py_spy_failure(42, "Error: Permission denied (os error 13)\n")
    assert isinstance(err, BadInput)
    assert str(err).startswith("ptrace not permitted for pid 42 (Error: Permission denied (os error 13))")
    assert "CAP_SYS_PTRACE" in str(err) and "launch mode" in str(err)


def test_operation_not_permitted_with_backtrace_is_ptrace():
    stderr = ("Error: Operation not permitted (os error 1)\nStack backtrace:\n   0: py_spy::main\n"
              "   1: std::rt::lang_start\n")
    err = classify_py_spy_failure(42, stderr)
    assert str(err).startswith("ptrace not permitted for pid 42 (Error: Operation not permitted (os error 1))")


def test_not_a_python_process():
    err = classify_py_spy_failure(42, "Error: Failed to find python version from target process\n")
    assert str(err) == "pid 42 is not a Python process py-spy can read (Error: Failed to find python version " \
                       "from target process)"


def test_other_failures_quote_the_first_error_line():
    err = classify_py_spy_failure(42, "warning: something\nError: No such process\n")
    assert str(err) == "cannot read pid 42 with py-spy: Error: No such process"
    assert str(classify_py_spy_failure(42, "")) == "cannot read pid 42 with py-spy: py-spy failed"


def test_a_transient_py_spy_failure_is_retried_before_refusing_a_pid(monkeypatch):
    """"Failed to get stack traces" once (the interpreter caught mid-change) must not refuse the pid."""
    import types

    from fieldguide.targets import attach as targets

    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        code = 1 if len(calls) == 1 else 0
        return types.SimpleNamespace(returncode=code, stderr="Error: Failed to get stack traces\n", stdout="")

    from fieldguide.host import access, samplers

    monkeypatch.setattr(samplers, "run", fake_run)
    monkeypatch.setattr(access, "py_spy_path", lambda: "/usr/bin/py-spy")
    monkeypatch.setattr(targets, "py_spy_path", lambda: "/usr/bin/py-spy")
    target = targets.AttachTarget.__new__(targets.AttachTarget)
    target._pid = 4242
    monkeypatch.setattr(targets.AttachTarget, "alive", lambda self: True)
    target._check_readable()  # no exception: the second dump worked
    assert len(calls) == 2


def test_a_run_of_transient_failures_is_settled_by_one_blocking_dump(monkeypatch):
    """Non-blocking dumps of a busy loop fail in runs; a blocking one reads it, and only then is
    the pid readable. Three failed non-blocking dumps alone would refuse it."""
    import types

    from fieldguide.targets import attach as targets

    calls: list[list[str]] = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        code = 1 if "--nonblocking" in cmd else 0
        return types.SimpleNamespace(returncode=code, stderr="Error: Failed to get stack traces\n", stdout="")

    from fieldguide.host import access, samplers

    monkeypatch.setattr(samplers, "run", fake_run)
    monkeypatch.setattr(access, "py_spy_path", lambda: "/usr/bin/py-spy")
    monkeypatch.setattr(targets.time, "sleep", lambda s: None)
    monkeypatch.setattr(targets, "py_spy_path", lambda: "/usr/bin/py-spy")
    target = targets.AttachTarget.__new__(targets.AttachTarget)
    target._pid = 4242
    monkeypatch.setattr(targets.AttachTarget, "alive", lambda self: True)
    target._check_readable()
    assert [("--nonblocking" in c) for c in calls] == [True, True, True, False]

    calls.clear()
    monkeypatch.setattr(samplers, "run", lambda cmd, **kw: (calls.append(cmd), types.SimpleNamespace(
        returncode=1, stderr="Error: Failed to get stack traces\n", stdout=""))[1])
    with pytest.raises(BadInput, match="cannot read pid 4242"):
        target._check_readable()
    assert len(calls) == 4


class _Attached:
    """An attached target as training.activity sees it: no agent, alive."""

    agent = None
    pid = 4242

    def alive(self) -> bool:
        return True


def _window(samples: int, backward: float, forward: float) -> Measurement:
    return Measurement(probe="stacks.sample", values={"samples": samples, "backward_fraction": backward,
                                                      "optimizer_fraction": 0.0, "forward_fraction": forward},
                       evidence={"top_stacks": [{"stack": "select (selectors.py) ← get_batch (train.py)"}]})


def test_a_loop_starved_of_input_is_looked_at_longer_before_it_is_called_not_training() -> None:
    from fieldguide.probes.training import TrainingActivity

    asked: list[dict[str, Any]] = []
    windows = [_window(120, 0.0, 0.0), _window(400, 0.01, 0.005)]  # the first window missed its rare steps

    def measure(probe: str, params: dict[str, Any]) -> Measurement:
        asked.append(params)
        return windows[len(asked) - 1]

    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure))  # type: ignore[arg-type]
    assert asked == [{}, {"seconds": 8.0, "rate": 100}]
    assert m.ok and m.values["trains"] is True and m.values["samples"] == 520

    asked.clear()
    windows = [_window(120, 0.0, 0.0), _window(400, 0.0, 0.0)]  # nothing in either: not training, with where it is
    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure))  # type: ignore[arg-type]
    assert m.ok and m.values["trains"] is False  # a reading that departs, not a failure to measure
    assert "no forward or backward in 520 samples" in m.values["seen"]
    assert "select (selectors.py)" in m.values["seen"]


def test_a_forward_seen_too_rarely_to_expect_a_backward_is_walked_as_training() -> None:
    """3 forwards in 520 samples and no backward is chance (a loop whose batches dwarf its model);
    a forward in a third of the samples with no backward is a model being served."""
    from fieldguide.probes.training import TrainingActivity

    windows: list[Measurement] = []

    def measure(probe: str, params: dict[str, Any]) -> Measurement:
        return windows.pop(0)

    windows[:] = [_window(120, 0.0, 0.0), _window(400, 0.0, 0.0075)]
    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure))  # type: ignore[arg-type]
    assert m.ok and m.values["trains"] is True and m.values["forward_samples"] == 3
    assert "no backward" in m.provenance

    windows[:] = [_window(120, 0.0, 0.4), _window(400, 0.0, 0.4), _window(300, 0.0, 0.4), _window(150, 0.0, 0.4)]
    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure))  # type: ignore[arg-type]
    assert m.ok and m.values["trains"] is False and "forward only: a model being served" in m.values["seen"]
    assert not windows  # a dense look, then a sparse one: a server still serves


def test_a_backward_far_shorter_than_its_forward_is_found_by_a_dense_look() -> None:
    """A loop sleeping 2 ms a sample: its forward took 16x its backward (the intra-op threads
    waking); 11 forward samples in 120 and 70 in 800 at 100 Hz, no backward. 3 s at 1000 Hz."""
    from fieldguide.probes.training import TrainingActivity

    asked: list[dict[str, Any]] = []
    windows = [_window(120, 0.0, 0.09), _window(800, 0.0, 0.09), _window(413, 0.039, 0.6)]

    def measure(probe: str, params: dict[str, Any]) -> Measurement:
        asked.append(params)
        return windows.pop(0)

    forgotten: list[str] = []
    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure,  # type: ignore[arg-type]
                                            forget=forgotten.append))
    assert asked == [{}, {"seconds": 8.0, "rate": 100}, {"seconds": 3.0, "rate": 1000}]
    assert m.ok and m.values["trains"] is True and m.values["training_samples"] == 16
    assert forgotten == []  # no evaluation: the windows taken stand for the steps


def test_an_evaluation_is_waited_out_before_forward_passes_are_called_serving() -> None:
    """Attached during a training job's evaluation (forward passes under no_grad, 30 s at nanoGPT's
    iteration 0): the third look, 15 s at 10 Hz, sees the training steps that follow it."""
    from fieldguide.probes.training import TrainingActivity

    asked: list[dict[str, Any]] = []
    windows = [_window(120, 0.0, 0.5), _window(800, 0.0, 0.5), _window(300, 0.0, 0.5), _window(150, 0.3, 0.3)]

    def measure(probe: str, params: dict[str, Any]) -> Measurement:
        asked.append(params)
        return windows.pop(0)

    forgotten: list[str] = []
    m = TrainingActivity().run(ProbeContext(target=_Attached(), measure=measure,  # type: ignore[arg-type]
                                            forget=forgotten.append))
    assert asked[-1] == {"seconds": 15.0, "rate": 10}
    assert m.ok and m.values["trains"] is True
    assert forgotten == ["stacks.sample"]  # the evaluation's window is not judged as the steps


def test_a_request_answered_before_its_thread_is_kept_is_still_its_reply() -> None:
    """loop.steps asks for input stacks on a thread; a reply faster than the caller once landed
    where the thread was expected ('AgentReply' object has no attribute 'join')."""
    from fieldguide.probes.loop import Background

    fast = Background("t", lambda: "reply")
    assert fast.result(timeout=5) == "reply"
    never = Background("t", lambda: time.sleep(0.5) or "late")
    assert never.result(timeout=0.01) is None


def test_a_request_that_raises_is_said_not_lost_with_its_thread() -> None:
    """memory.growth kept its reply in a list the thread appended to: a request that raised left
    it empty, and the probe failed with IndexError instead of the request's own error."""
    from types import SimpleNamespace

    from fieldguide.probes.loop import Background
    from fieldguide.probes.memory import MemoryGrowth

    def boom() -> None:
        raise ConnectionError("the agent went away")

    failed = Background("t", boom)
    assert failed.result(timeout=5) is None and isinstance(failed.error, ConnectionError)

    probe = MemoryGrowth()
    conn = SimpleNamespace(steps=[], stream=lambda *a: SimpleNamespace(items=[]))
    probe.connection = lambda ctx: conn  # type: ignore[method-assign]
    probe.hook_failures = lambda ctx, c: []  # type: ignore[method-assign]
    probe.ask = lambda ctx, params, timeout, name: boom()  # type: ignore[method-assign]
    probe.reading = lambda ctx, **kw: None  # type: ignore[method-assign]
    ctx = SimpleNamespace(budget_left=30.0)
    m = probe.run(ctx, seconds=1.0)  # type: ignore[arg-type]
    assert not m.ok and "ConnectionError: the agent went away" in (m.unavailable or "")
