"""The low-gpu-util paths on a real GPU: NVML's window on the job's device, host syncs found at
their line, device time per step from CUDA events, pageable copies in the profile, and the walk.
Skipped without a GPU (scripts/gpu-check runs them on one)."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fieldguide.targets import LaunchTarget
from tests.conftest import run_fieldguide

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda")]

# .item() every step (line 8), and a batch copied from pageable host memory every step.
SYNCS_AND_COPIES = textwrap.dedent("""
    import time, torch
    m = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10)).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    host = torch.randn(4096, 2048)  # pageable
    end = time.time() + 90
    while time.time() < end:
        loss = m(host.cuda()).square().mean(); seen = loss.item()
        opt.zero_grad(); loss.backward(); opt.step()
""")


@pytest.fixture
def job(tmp_path: Path):
    script = tmp_path / "syncs.py"
    script.write_text(SYNCS_AND_COPIES)
    target = LaunchTarget([sys.executable, str(script)])
    try:
        assert target.wait_ready(timeout=90, min_steps=5)
        yield target
    finally:
        target.close()


def test_syncs_are_found_at_the_jobs_line(job: LaunchTarget) -> None:
    assert job.agent is not None
    reply = job.agent.request("cuda", {"steps": 5}, timeout=60, name="syncs")
    assert reply.ok, reply.error
    assert reply.result["per_step"] >= 1
    assert reply.result["sites"][0]["where"].startswith("syncs.py:8")


def test_device_time_per_step_from_cuda_events(job: LaunchTarget) -> None:
    assert job.agent is not None
    reply = job.agent.request("cuda", {"steps": 10}, timeout=60, name="device_time")
    assert reply.ok, reply.error
    assert len(reply.result["device_ms"]) == 10 and all(ms > 0 for ms in reply.result["device_ms"])


def test_pageable_copies_show_in_the_profile(job: LaunchTarget) -> None:
    assert job.agent is not None
    from fieldguide.probes.opprofile import ask_profile

    reply = ask_profile(job.agent, 5, 60.0)
    assert reply.ok, reply.error
    profile = reply.result["profile"]
    assert profile["kernels_per_step"] > 0
    assert profile["h2d_pageable_per_step"] >= 1


def test_the_nvml_window_sees_the_job_on_its_gpu(job: LaunchTarget) -> None:
    from fieldguide.host.gpuwindow import job_devices, sample_window, summarize
    from fieldguide.host.nvml import Nvml

    nvml = Nvml.open()
    try:
        indices, how = job_devices(nvml, {job.pid}, None)
        assert how.startswith("the job's processes")
        values, missing = summarize(sample_window(nvml, indices, {job.pid}, seconds=2))
    finally:
        nvml.close()
    assert values["gpu_util_median"] is not None and values["gpu_util_median"] > 0
    assert values["job_memory_mb"] > 0
    print("window", json.dumps(values), "missing", missing)  # what this device reports, for the record


def test_the_walk_departs_at_the_sync(tmp_path: Path) -> None:
    script = tmp_path / "syncs.py"
    script.write_text(SYNCS_AND_COPIES)
    report = tmp_path / "r.json"
    started = time.monotonic()
    proc = run_fieldguide("diagnose", "--playbook", "low-gpu-util", "--report", str(report), "--",
                          sys.executable, str(script), timeout=180)
    data = json.loads(report.read_text())
    print("walk", round(time.monotonic() - started, 1), "s:", [(p["node"], p["status"]) for p in data["path"]])
    assert proc.returncode == 1, proc.stderr
    assert data["first_departure"]["cause"] in ("host.sync", "input.h2d_copy")
