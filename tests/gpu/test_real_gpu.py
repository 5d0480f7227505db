"""Real-GPU checks: skipped cleanly where there is no NVIDIA GPU (run them with scripts/gpu-check)."""

from __future__ import annotations

import sys

import pytest

from fieldguide.probes.gpu import NvmlUnavailable, nvml_devices

pytestmark = pytest.mark.gpu


def _devices() -> list[dict]:
    try:
        return nvml_devices()
    except NvmlUnavailable as err:
        pytest.skip(f"no GPU here: {err}")
    return []


def test_nvml_sees_devices_with_readings() -> None:
    devices = _devices()
    if not devices:
        pytest.skip("NVML works but reports no GPUs")
    first = devices[0]
    assert first["name"]
    assert first["memory_total_mb"] and first["memory_total_mb"] > 1000
    assert first["utilization_gpu"] is None or 0 <= first["utilization_gpu"] <= 100


def test_agent_reads_cuda_state_in_a_launched_cuda_job(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    _devices()
    script = tmp_path / "cuda_job.py"
    script.write_text(
        "import os, time, torch\n"
        "torch.cuda.set_sync_debug_mode(1)\n"
        "m = torch.nn.Linear(512, 512).cuda(); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "x = torch.randn(256, 512, device='cuda')\n"
        "end = time.time() + 40\n"
        "while time.time() < end:\n"
        "    loss = m(x).square().mean(); opt.zero_grad(); loss.backward(); opt.step()\n")
    from tests.conftest import run_fieldguide

    report = tmp_path / "r.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(report), "--",
                          sys.executable, str(script), timeout=120)
    import json

    data = json.loads(report.read_text())
    assert data["environment"]["cuda"], proc.stderr
    assert data["environment"]["gpus"], "NVML GPUs are carried into the report"
    assert (data["first_departure"] or {}).get("cause") == "host.debug_mode", proc.stderr


def test_node_check_reads_every_gpus_fitness() -> None:
    from fieldguide.probes.node_gpu import gpu_health

    if not _devices():
        pytest.skip("NVML works but reports no GPUs")
    values, rows = gpu_health()
    assert values["gpus"] == len(rows) >= 1
    assert all(isinstance(values[k], int) for k in ("gpus_with_errors", "gpus_with_others", "gpus_pcie_short"))
    assert rows[0]["pcie"] != "n/a" or "pcie_width" in rows[0]["unsupported"]
