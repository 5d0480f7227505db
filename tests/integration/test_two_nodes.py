"""Two "nodes" of one job on this machine (torchrun --nnodes 2, a static rendezvous on 127.0.0.1),
one fieldguide walk per node as on a cluster, and `report merge` over their reports: a fast
node's walk says it waits for ranks it cannot see (never communication on that alone), the merge
names the slow node and its ranks, and a healthy job's nodes merge clean."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fieldguide import workloads
from tests.conftest import FIELDGUIDE, check_report, run_fieldguide

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def walk_each_node(tmp_path: Path, workload: str, per_node: int) -> tuple[list[Path], list[dict[str, Any]], int]:
    """One launched slow-training walk per node of a 2-node job, at once: the reports' paths,
    their contents and the rendezvous port."""
    port = free_port()
    env = {**os.environ, "FIELDGUIDE_WORKLOAD_SECONDS": "60", "NO_COLOR": "1", "COLUMNS": "120"}
    walks = []
    for node in (0, 1):
        node_cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                    "--nproc-per-node", str(per_node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                    str(workloads.path(workload))]
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
        check_report(reports[-1])
    for node, data in enumerate(reports):
        assert data["job"]["world_size"] == 2 * per_node and data["job"]["master"] == f"127.0.0.1:{port}", data["job"]
        ranks = list(range(node * per_node, (node + 1) * per_node))
        assert [(r["rank"], r["node_rank"]) for r in data["ranks"]] == [(r, node) for r in ranks], data["ranks"]
    return [r for r, _ in walks], reports, port


def merged(tmp_path: Path, paths: list[Path]) -> dict[str, Any]:
    out = tmp_path / "merged.json"
    proc = run_fieldguide("report", "merge", *(str(p) for p in paths), "--format", "json", "-o", str(out), timeout=30)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(out.read_text()))


def cause(data: dict[str, Any]) -> str | None:
    return (data["first_departure"] or {}).get("cause")


def test_one_rank_per_node_the_merge_names_the_slow_node(tmp_path: Path) -> None:
    # Rank 1 reads its shard from slow storage: under one rank per node it is node 1's only rank.
    paths, (fast, slow), _ = walk_each_node(tmp_path, "ddp_straggler_input", per_node=1)
    assert cause(fast) == "dist.waits_on_remote_ranks", json.dumps(fast["path"], indent=1)
    assert cause(slow) not in ("dist.comm_bound", "dist.waits_on_remote_ranks")
    view = merged(tmp_path, paths)
    assert view["slow_node"]["node"] == "node 1" and view["slow_node"]["ranks"] == [1], view["slow_node"]
    assert view["causes"][0]["cause"] == "dist.slow_node"
    assert view["straggler"]["rank"] == 1
    again = run_fieldguide("report", "merge", str(paths[0]), str(paths[0]), timeout=30)
    assert again.returncode == 2 and "given twice" in again.stderr


def test_two_ranks_per_node_the_merge_names_the_slow_nodes_ranks(tmp_path: Path) -> None:
    # Node 1's two ranks run at a third of node 0's speed, alike: neither node alone has a straggler.
    paths, (fast, slow), _ = walk_each_node(tmp_path, "ddp_slow_node", per_node=2)
    assert cause(fast) == "dist.waits_on_remote_ranks", json.dumps(fast["path"], indent=1)
    assert cause(slow) not in ("dist.comm_bound", "dist.waits_on_remote_ranks", "dist.straggler"), slow["path"]
    view = merged(tmp_path, paths)
    assert view["slow_node"]["node"] == "node 1" and view["slow_node"]["ranks"] == [2, 3], view["slow_node"]
    assert view["causes"][0]["cause"] == "dist.slow_node"


def test_a_healthy_jobs_nodes_merge_clean(tmp_path: Path) -> None:
    paths, reports, _ = walk_each_node(tmp_path, "ddp_healthy", per_node=1)
    assert [d["verdict"] for d in reports] == ["clean", "clean"], [d["path"] for d in reports]
    view = merged(tmp_path, paths)
    assert view["verdict"] == "clean" and view["slow_node"] is None and view["straggler"] is None, view
