"""Two "nodes" of one job on this machine (torchrun --nnodes 2, a static rendezvous on 127.0.0.1),
one fieldguide walk per node as on a cluster, and `report merge` over their reports: the fast
node's walk says it waits for ranks it cannot see (never communication on that alone), and the
merge names the slow node and its rank."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fieldguide import workloads
from tests.conftest import FIELDGUIDE, run_fieldguide

pytestmark = pytest.mark.integration

# Rank 1 reads its shard from slow storage: under one rank per node it is node 1's only rank.
SLOW = "ddp_straggler_input"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_merge_of_each_nodes_report_names_the_slow_node(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "FIELDGUIDE_WORKLOAD_SECONDS": "60", "NO_COLOR": "1", "COLUMNS": "120"}
    walks = []
    for node in (0, 1):
        node_cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                    "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                    str(workloads.path(SLOW))]
        report = tmp_path / f"report-node{node}.json"
        walks.append((report, subprocess.Popen([*FIELDGUIDE, "diagnose", "--playbook", "slow-training",
                                                "--report", str(report), "--", *node_cmd],
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)))
    reports = []
    for report, walk in walks:
        _, err = walk.communicate(timeout=240)
        assert "Traceback" not in err, err
        assert report.exists(), err
        reports.append(json.loads(report.read_text()))
    fast, slow = reports
    for data, node in ((fast, 0), (slow, 1)):
        assert data["job"]["world_size"] == 2 and data["job"]["master"] == f"127.0.0.1:{port}", data["job"]
        assert [(r["rank"], r["node_rank"]) for r in data["ranks"]] == [(node, node)], data["ranks"]
    fast_cause = (fast["first_departure"] or {}).get("cause")
    assert fast_cause == "dist.waits_on_remote_ranks", json.dumps(fast["path"], indent=1)
    assert (slow["first_departure"] or {}).get("cause") not in ("dist.comm_bound", "dist.waits_on_remote_ranks")
    merged_path = tmp_path / "merged.json"
    merged = run_fieldguide("report", "merge", *(str(r) for r, _ in walks), "--format", "json",
                            "-o", str(merged_path), timeout=30)
    assert merged.returncode == 0, merged.stderr
    view = json.loads(merged_path.read_text())
    assert view["slow_node"]["node"] == "node 1" and view["slow_node"]["ranks"] == [1], view["slow_node"]
    assert view["causes"][0]["cause"] == "dist.slow_node"
    assert view["straggler"]["rank"] == 1
    again = run_fieldguide("report", "merge", str(walks[0][0]), str(walks[0][0]), timeout=30)
    assert again.returncode == 2 and "given twice" in again.stderr
