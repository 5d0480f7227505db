"""Past compute-bound: the agent counts one step's FLOPs by dtype with torch's own formulas (real
torch, in this process), the probe's judgement of a slow dtype and of threads below the cores, the
precision read from BLAS routine names from outside, and the walk's two new departures."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.playbook import find_playbook
from fieldguide.probes.efficiency import dtype_mix, slow_share, usable_cores
from fieldguide.probes.native_stacks import blas_counts
from fieldguide.walk.engine import DEPARTURE, Walk
from tests.unit.fg_fakes import FakeMeasure, healthy_values

torch = pytest.importorskip("torch")


class FakeAgent:
    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.listeners: list[Any] = []

    def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self.replies.append(result)

    def fail(self, request_id: Any, error: str) -> None:
        self.replies.append({"error": error})

    def add_step_listener(self, capability: Any) -> None:
        self.listeners.append(capability)

    def remove_step_listener(self, capability: Any) -> None:
        self.listeners = [c for c in self.listeners if c is not capability]

    def hook_failed(self, *args: Any) -> None:
        raise AssertionError(args)


def test_one_step_is_counted_by_dtype_with_where_float64_and_the_threads_came_from(monkeypatch) -> None:
    from fieldguide.agent.inside.capabilities import efficiency

    # Restored after the test: the capability wraps these as a launched job's agent does.
    monkeypatch.setattr(torch, "set_num_threads", torch.set_num_threads)
    monkeypatch.setattr(torch.nn.Module, "double", torch.nn.Module.double)
    monkeypatch.setattr(torch.nn.Module, "to", torch.nn.Module.to)
    monkeypatch.setattr(torch, "set_default_dtype", torch.set_default_dtype)
    threads = torch.get_num_threads()
    agent = FakeAgent()
    capability = efficiency.Efficiency(agent)  # type: ignore[arg-type]
    capability.start()
    capability.hook_torch(torch)
    try:
        torch.set_num_threads(1)
        model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        capability.on_request("efficiency", 1, {"count": True})
        for _ in range(3):  # the count runs from one step boundary to the next
            x = torch.randn(32, 64, dtype=torch.float64)
            loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (32,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            for listener in list(agent.listeners):
                listener.on_step()
    finally:
        torch.set_num_threads(threads)
    assert len(agent.replies) == 1 and not agent.listeners
    reply = agent.replies[0]
    # Forward 2·B·(64·128 + 128·10); backward: weight grads of both layers, the input grad of the
    # second (the first layer's input needs none).
    forward = 2 * 32 * (64 * 128 + 128 * 10)
    expected = forward + 2 * 32 * 64 * 128 + 2 * (2 * 32 * 128 * 10)
    assert reply["flops"] == {"float64 cpu matmul": expected}
    assert reply["threads"] == 1 and reply["origins"]["threads"]["value"] == 1
    assert reply["origins"]["threads"]["at"].endswith("test_efficiency.py:" + str(_line_of("torch.set_num_threads(1)")))
    assert reply["origins"]["float64"]["value"] == "Module.double()"


def _line_of(text: str) -> int:
    from pathlib import Path

    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip() == text)


def test_a_slow_dtype_is_float64_anywhere_and_float32_matmuls_without_tf32_on_tensor_cores() -> None:
    cpu = {"float64 cpu matmul": 9e9, "float32 cpu matmul": 1e9}
    assert slow_share(cpu, {}) == (0.9, "float64")
    ampere = {"cuda_capability": [8, 0], "matmul_precision": "highest", "cuda_tf32_matmul": False}
    gpu = {"float32 cuda matmul": 3e12, "float32 cuda conv": 1e12}
    assert slow_share(gpu, ampere) == (0.75, "float32 without TF32")  # cuDNN convolutions use TF32 already
    assert slow_share(gpu, {**ampere, "matmul_precision": "high"}) == (0.0, "")
    assert slow_share(gpu, {**ampere, "cuda_capability": [7, 0]}) == (0.0, "")  # no tensor-core TF32 on Volta
    assert slow_share({"bfloat16 cuda matmul": 5e12}, ampere) == (0.0, "")
    assert dtype_mix(cpu) == "float64 on cpu 90%, float32 on cpu 10%"


def test_usable_cores_are_the_affinity_under_the_quota_shared_by_the_local_ranks(tmp_path, monkeypatch) -> None:
    assert usable_cores({"affinity": 16}, None) == (16.0, "16 cores in its affinity")
    cores, why = usable_cores({"affinity": 16, "local_world_size": "8"}, None)
    assert cores == 2.0 and "shared by 8 ranks" in why
    assert usable_cores({}, None)[0] is None


def test_blas_routine_names_tell_the_precision_from_outside() -> None:
    raw = "\n".join([
        "main (train.py:9);at::native::cpublas::gemm (libtorch_cpu.so);mkl_blas_dgemm (libtorch_cpu.so);"
        "mkl_blas_avx2_xdgemm (libtorch_cpu.so) 7",
        "main (train.py:9);at::native::addmm_impl_cpu_ (libtorch_cpu.so);sgemm_kernel_HASWELL (libopenblas.so) 2",
        "main (train.py:9);at::native::addmm_impl_cpu_ (libtorch_cpu.so) 5",  # no BLAS frame sampled
        "main (train.py:12);zgemm_ (libopenblas.so) 1",
    ])
    assert blas_counts(raw) == {"d": 7, "s": 2, "z": 1}
    assert blas_counts("garbage without a count\n;;; x") == {}


def walk(values: dict[str, dict[str, Any]], caps: frozenset[str] = frozenset({"process", "agent"})) -> Walk:
    found = Walk(find_playbook("slow-training"), lambda: set(caps), FakeMeasure(values))
    found.run()
    return found


def test_a_float64_step_departs_as_device_precision_with_its_line() -> None:
    values = healthy_values()
    values["torch.efficiency"] = {**values["torch.efficiency"], "slow_dtype_fraction": 1.0, "slow_dtype": "float64",
                                  "dtype_mix": "float64 on cpu 100%",
                                  "precision_from": "set by Module.double() at train.py:14"}
    found = walk(values)
    assert found.verdict == DEPARTURE and found.departure is not None
    assert found.departure.cause.id == "device.precision" and found.departure.node == "device.efficiency"
    assert "100% of the step's arithmetic is done in float64" in found.departure.summary
    assert "Module.double() at train.py:14" in found.departure.summary


def test_threads_below_the_cores_depart_only_where_the_long_ops_would_gain() -> None:
    values = healthy_values()
    values["torch.efficiency"] = {**values["torch.efficiency"], "intra_op_threads": 1, "usable_cores": 2.0,
                                  "idle_cores": 0.9, "long_op_fraction": 0.9, "threads_gain": 0.43,
                                  "threads_from": "set by torch.set_num_threads(1) at train.py:8"}
    found = walk(values)
    assert found.departure is not None and found.departure.cause.id == "host.threads_limited"
    assert "torch.set_num_threads(1) at train.py:8" in found.departure.summary
    values["torch.efficiency"]["threads_gain"] = 0.05  # small ops: more threads would not help
    assert walk(values).verdict == "clean"


def test_from_outside_the_blas_precision_decides_and_the_threads_node_is_skipped() -> None:
    values = healthy_values()
    values["stacks.native"] = {"slow_dtype_fraction": 0.95, "slow_dtype": "float64", "blas_samples": 19, "samples": 20}
    found = walk(values, frozenset({"process"}))
    assert found.departure is not None and found.departure.cause.id == "device.precision"


def test_threads_and_precision_are_shares_ranked_with_the_others() -> None:
    """A job with a save every step (40% of it) and one thread of two cores (20% to gain): one job,
    one verdict, the largest share first; the thread count follows under also-departing."""
    values = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "io_fraction": 0.4, "save_fraction": 0.4}
    values["torch.efficiency"] = {**values["torch.efficiency"], "intra_op_threads": 1, "usable_cores": 2.0,
                                  "idle_cores": 0.9, "long_op_fraction": 0.4, "threads_gain": 0.2,
                                  "threads_from": "set by torch.set_num_threads(1) at train.py:8"}
    found = walk(values)
    assert found.departure is not None and found.departure.cause.id == "host.blocking_io"
    assert [d.cause.id for d in found.also] == ["host.threads_limited"]
    values["torch.efficiency"]["threads_gain"] = 0.45  # now the larger share
    found = walk(values)
    assert found.departure.cause.id == "host.threads_limited" and found.departure.share == 0.45


def test_a_count_nobody_waits_for_any_more_is_failed_and_unhooked() -> None:
    from fieldguide.agent.inside.capabilities import efficiency

    agent = FakeAgent()
    capability = efficiency.Efficiency(agent)  # type: ignore[arg-type]
    capability.start()
    capability.on_request("efficiency", 7, {"count": True, "timeout_s": 0})
    assert agent.listeners == [capability]
    capability.on_request("efficiency", 8, {"count": True})  # one count at a time
    assert agent.replies == [{"error": "a FLOP count is already running"}]
    import time

    time.sleep(0.01)
    capability.tick()
    assert agent.replies[-1] == {"error": "no training step came to count"} and agent.listeners == []


def test_the_probe_reads_a_count_with_its_rate_threads_and_what_the_counted_step_took() -> None:
    import types

    from fieldguide.agent.channel import AgentReply
    from fieldguide.measurement import Measurement
    from fieldguide.probes.base import ProbeContext
    from fieldguide.probes.efficiency import StepEfficiency

    state = {"flops": {"float64 cpu matmul": 3.0e9, "float32 cpu matmul": 1.0e9}, "counted_s": 0.0412,
             "threads": 1, "affinity": 2, "env": {}, "env_set_by_job": [], "cpus": 2,
             "origins": {"float64": {"value": "Module.double()", "at": "/job/train.py:12"},
                         "threads": {"value": 1, "at": "/job/train.py:3"}}}
    agent = types.SimpleNamespace(request=lambda *a, **k: AgentReply(True, result=state), primary=lambda: None)
    measured = {"loop.steps": {"step_ms_median": 20.0}, "torch.ops": {"long_op_fraction": 0.8},
                "dist.ranks": {"ranks_seen": 1}}

    def measure(probe_id: str, params: dict[str, Any]) -> Measurement:
        return Measurement(probe=probe_id, values=measured.get(probe_id, {}))

    ctx = ProbeContext(target=types.SimpleNamespace(agent=agent, alive=lambda: True, pid=None),  # type: ignore[arg-type]
                       measure=measure)
    m = StepEfficiency().run(ctx)
    assert m.ok, m.unavailable
    values = m.values
    assert values["gflop_per_step"] == 4.0 and values["achieved_gflops"] == 200.0  # 4 GFLOP in 20 ms
    assert values["counted_step_ms"] == 41.2  # the counted step, against the 20 ms median: the count's cost
    assert values["slow_dtype_fraction"] == 0.75 and "train.py:12" in values["precision_from"]
    assert values["intra_op_threads"] == 1 and values["idle_cores"] is not None


def test_the_report_says_the_rate_against_the_peak_and_what_the_count_took(walk_with: Any) -> None:
    from fieldguide.report.findings import environment_from, findings_from_walk
    from fieldguide.report.render import render

    walk, _ = walk_with({})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [])
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]}, env)
    findings.evidence["device.efficiency"] = {"rate": {
        "gflop_per_step": 4.0, "dtype_mix": "float64 on cpu 75% of 4 GFLOP a step", "achieved_gflops": 200.0,
        "peak_gflops": 400.0, "peak_from": "calibrated 2026-12-07", "intra_op_threads": 1, "usable_cores": 2.0,
        "usable_why": "2 cores in its affinity", "counted_step_ms": 41.2}}
    text = render(findings, "md")
    assert "This step does 4 GFLOP (float64 on cpu 75%) at 200 GFLOP/s: 50% of this machine's peak" in text
    assert "counted over one step, which took 41.2 ms under the count" in text
