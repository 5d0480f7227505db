"""A job larger than the node a walk sees: one rank of many compared with nothing, the wait for ranks
elsewhere named as such (never communication on that evidence alone), the job's identity carried in
the report, and the ranks that Slurm and frameworks' launchers start told apart."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.agent.inside.capabilities.collectives import job_identity, node_rank_of
from fieldguide.analysis.ranks import RankStats, compare, compare_margins, job_of
from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.report.findings import Findings
from fieldguide.report.render import to_markdown
from fieldguide.walk.engine import Walk


def test_one_rank_of_a_larger_job_is_nothing_to_compare_here_and_its_wait_is_kept() -> None:
    alone = RankStats(rank=1, pid=7, host="n1", steps=40, step_ms=20.0, data_wait=0.0, collective_wait=0.9,
                      node_rank=1, wait_margin=0.02)
    values = compare([alone])
    assert values["own_work_ratio"] == 1.0 and values["wait_gap"] == 0.0  # no straggler among one
    assert values["comm_fraction_mean"] == 0.9 and values["slowest_rank"] == 1
    assert alone.verdict == "waits 90% of its step in collectives"
    assert compare_margins([alone], values) == {"comm_fraction_mean": 0.02}
    assert alone.row()["node_rank"] == 1


def _walk(**dist: Any) -> Walk:
    base = {"world_size": 4, "ranks_seen": 2, "ranks_measured": 2, "ranks_remote": 2, "own_work_ratio": 1.05,
            "others_wait_fraction": 0.85, "wait_gap": 0.02, "comm_fraction_min": 0.85, "comm_fraction_max": 0.9,
            "comm_fraction_mean": 0.88}

    def measure(option):  # type: ignore[no-untyped-def]
        if option.probe == "training.activity":
            return Measurement(probe=option.probe, values={"trains": True})
        return Measurement(probe="dist.ranks", values={**base, **dist})

    walk = Walk(find_playbook("slow-training"), lambda: {"process", "agent", "launch"}, measure)
    walk.run()
    return walk


def test_ranks_waiting_for_ranks_on_other_nodes_are_not_called_communication_bound() -> None:
    walk = _walk()
    assert walk.departure is not None and walk.departure.cause.id == "dist.waits_on_remote_ranks"
    assert [r.node for r in walk.path] == ["target.trains", "dist.ranks", "dist.comm", "dist.remote"]
    assert "2 of the job's 4 ranks run on other nodes" in walk.departure.summary
    assert "report merge" in " ".join(walk.departure.cause.fix)


def test_the_same_waits_with_every_rank_here_are_communication() -> None:
    walk = _walk(world_size=2, ranks_remote=0)
    assert walk.departure is not None and walk.departure.cause.id == "dist.comm_bound"


def test_ranks_here_that_hardly_wait_pass_whatever_runs_elsewhere() -> None:
    walk = _walk(comm_fraction_min=0.05, comm_fraction_max=0.1, comm_fraction_mean=0.08, others_wait_fraction=0.05)
    assert "dist.remote" not in [r.node for r in walk.path]


@pytest.mark.parametrize(("env", "want"), [
    # torchrun: its own names, the node from GROUP_RANK, the job from its run id
    ({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "abc",
      "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"},
     {"RANK": "5", "WORLD_SIZE": "8", "NODE_RANK": "1", "JOB_ID": "abc"}),
    # srun starting the ranks itself: Slurm's names only
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_JOB_ID": "77",
      "SLURM_STEP_ID": "0", "SLURM_NTASKS_PER_NODE": "2(x2)"},
     {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "NODE_RANK": "1", "JOB_ID": "slurm-77.0",
      "LOCAL_WORLD_SIZE": "2"}),
    # torchrun under Slurm: torchrun's names win
    ({"RANK": "0", "WORLD_SIZE": "2", "SLURM_PROCID": "9", "SLURM_NTASKS": "1", "TORCHELASTIC_RUN_ID": "r"},
     {"RANK": "0", "WORLD_SIZE": "2", "JOB_ID": "r"}),
    # Lightning's DDP: LOCAL_RANK and NODE_RANK, no RANK (node 0)
    ({"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}, {"RANK": "1", "NODE_RANK": "0"}),
])
def test_a_ranks_place_in_its_job_whoever_started_it(env: dict[str, str], want: dict[str, str]) -> None:
    found = job_identity(env)
    assert {k: found.get(k) for k in want} == want


def test_the_jobs_identity_is_its_run_id_and_rendezvous() -> None:
    identity = job_identity({"RANK": "0", "WORLD_SIZE": "4", "TORCHELASTIC_RUN_ID": "abc", "MASTER_ADDR": "10.0.0.1",
                             "MASTER_PORT": "29500", "GROUP_RANK": "0"})
    assert job_of(identity, 4) == {"id": "abc", "master": "10.0.0.1:29500", "world_size": 4}
    assert node_rank_of(identity) == 0 and node_rank_of({}) is None and node_rank_of({"NODE_RANK": "x"}) is None


def test_a_report_carries_the_job_and_every_rank_one_local_rank_included() -> None:
    row = RankStats(rank=1, pid=7, host="n1", steps=40, step_ms=20.0, data_wait=0.0, collective_wait=0.9,
                    node_rank=1)
    compare([row])
    findings = Findings(playbook="slow-training", playbook_title="Slow training", target={"kind": "launch", "pid": 7},
                        environment={}, verdict="clean", first_departure=None, conclusion=None, conclusion_text="",
                        path=[{"node": "target.trains", "status": "pass", "measured": {}, "expected": "", "probe": None,
                               "seconds": 0.0, "note": ""}],
                        ranks=[row.row()], job={"id": "abc", "master": "10.0.0.1:29500", "world_size": 2})
    again = Findings.from_json(findings.to_json())
    assert again.job == {"id": "abc", "master": "10.0.0.1:29500", "world_size": 2}
    text = to_markdown(again)
    assert "## Ranks" in text and "1 on other nodes" in text and "| 1 | 1 | n1 |" in text


def test_tasks_srun_started_are_found_from_outside(tmp_path: Any) -> None:
    """srun's step starts each task itself, with Slurm's variables and no RANK: attached to the step
    (or a task), its tasks of the same job step are the ranks, with their node."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from fieldguide.host.rankfinder import sibling_ranks

    step = tmp_path / "step.py"
    step.write_text(
        "import os, subprocess, sys, time\n"
        "for task, step in ((3, '0'), (2, '0'), (2, '1')):\n"
        "    env = dict(os.environ, SLURM_PROCID=str(task), SLURM_NTASKS='4', SLURM_LOCALID=str(task - 2),\n"
        "               SLURM_NODEID='1', SLURM_NTASKS_PER_NODE='2(x2)', SLURM_JOB_ID='77', SLURM_STEP_ID=step)\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], env=env)\n"
        "print('up', flush=True)\n"
        "time.sleep(30)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.Popen([sys.executable, str(step)], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.3)
        ranks = sibling_ranks(proc.pid)
        assert [(r["rank"], r["node_rank"], r["world_size"]) for r in ranks] == [(2, 1, 4), (3, 1, 4)]
        assert {r["identity"]["JOB_ID"] for r in ranks} == {"slurm-77.0"}
        assert [r["pid"] for r in sibling_ranks(ranks[1]["pid"])] == [r["pid"] for r in ranks]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
