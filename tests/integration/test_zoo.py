"""Launch and attach to the zoo's workloads on CPU and assert the cause the walk names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fieldguide import workloads
from tests.conftest import run_fieldguide

pytestmark = pytest.mark.integration

# Attach mode has no agent: these decide from py-spy and psutil alone.
ATTACHABLE = ["healthy_convnet", "loader_slow_workers", "loader_decode_cpu", "checkpoint_every_step",
              "debug_anomaly_ctx", "debug_profiler",
              "worker_restart_epochs"]


def diagnose(tmp_path: Path, *target: str) -> dict:
    report = tmp_path / "report.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(report), *target, timeout=150)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert report.exists(), proc.stderr
    data = json.loads(report.read_text())
    expected_status = {"departure": 1, "clean": 0, "inconclusive": 3}[data["verdict"]]
    assert proc.returncode == expected_status, proc.stderr
    return data


def cause_of(data: dict) -> str:
    return (data["first_departure"] or {}).get("cause", "")


@pytest.mark.parametrize("name", sorted(workloads.WORKLOADS))
def test_launch(tmp_path: Path, name: str) -> None:
    import sys

    data = diagnose(tmp_path, "--", sys.executable, str(workloads.path(name)))
    want = workloads.WORKLOADS[name]
    assert cause_of(data) == want, json.dumps(data["path"], indent=1)
    if want == "":
        assert data["verdict"] == "clean"
        assert data["conclusion"] == "device.compute_bound"
    assert data["target"]["kind"] == "launch"
    assert data["environment"]["torch"], "the agent reports torch's version"


@pytest.mark.parametrize("name", ATTACHABLE)
def test_attach(tmp_path: Path, name: str, workload_process) -> None:
    proc = workload_process(name)
    data = diagnose(tmp_path, "--pid", str(proc.pid))
    assert cause_of(data) == workloads.WORKLOADS[name], json.dumps(data["path"], indent=1)
    assert proc.poll() is None, "an attached job must keep running"
    assert data["target"]["kind"] == "attach"
    # No agent: the nodes that need it say so, and the walk goes on.
    skipped = [p for p in data["path"] if p["status"] == "skip"]
    assert all("launch" in p["note"] for p in skipped)


def test_a_target_that_exits_mid_walk_is_reported_not_a_crash(tmp_path: Path) -> None:
    import sys

    # The job trains for 4 s and exits while the walk is still measuring.
    report = tmp_path / "report.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(report), "--",
                          sys.executable, str(workloads.path("healthy_mlp")),
                          env={"FIELDGUIDE_WORKLOAD_SECONDS": "4"}, timeout=120)
    assert "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    assert data["verdict"] == "inconclusive", data["path"]
    assert proc.returncode == 3
    assert "exited" in data["note"]
    assert any("exited" in step["note"] for step in data["path"] if step["status"] == "error")
