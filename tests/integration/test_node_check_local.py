"""`diagnose --playbook node-check --local` measures this machine with no process and ends with a
verdict: on a machine without a GPU its host nodes decide."""

from __future__ import annotations

import json

import pytest

from tests.conftest import check_report, run_fieldguide

pytestmark = pytest.mark.integration


def test_the_machine_is_walked_with_no_process() -> None:
    proc = run_fieldguide("diagnose", "--playbook", "node-check", "--local", "--json", timeout=60)
    data = json.loads(proc.stdout)
    check_report(data)
    assert data["target"]["kind"] == "local" and data["verdict"] in ("clean", "departure"), data["path"]
    assert proc.returncode == {"clean": 0, "departure": 1}[data["verdict"]]
    measured = {step["node"]: step["status"] for step in data["path"]}
    for host_node in ("node.cpus", "node.shm", "node.memory", "node.files"):
        assert measured.get(host_node) in ("pass", "depart"), data["path"]
