"""Launch and attach to the zoo's workloads on CPU and assert the cause the walk names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fieldguide import workloads
from tests.conftest import check_artifacts, check_report, run_fieldguide

pytestmark = pytest.mark.integration

# Each workload declares its playbook, the cause (or healthy leaf) a walk must name and the modes it
# must pass in (its FIELDGUIDE literal, read without importing it). Attach mode has no agent: those
# decide from py-spy and psutil alone.
DECLARED = workloads.declarations()
# Attach runs `make test` keeps whatever the rule below says: training without a DataLoader seen
# from outside, and a process that is not training.
ALWAYS_ATTACHED = {"getbatch_waiting", "served_not_trained",
                   # ranks a framework's own launcher started (LOCAL_RANK, no RANK), found from outside
                   "lightning_ddp_straggler"}
# Compile walks pay a cold inductor compile each (15-80 s here): `make test` keeps one departure
# and the job that compiles nothing; the rest of the compile zoo runs in `make test-all`.
COMPILE_IN_MAKE_TEST = {"compile_item_branch", "compile_not_used"}
# Launched elsewhere in `make test` with the same cause asserted (test_coldstart.py), and the other
# slow-start departure (30 s: the same rule, the largest phase of the start, on another phase).
LAUNCHED_ELSEWHERE = {"start_checkpoint_slow_storage", "start_index_dataset",
                      # two nodes of it, each walked, in test_two_nodes.py
                      "ddp_slow_node"}
# Launched in `make test` even when another workload already shows their cause: the shapes of
# training the brief names (no torch.optim, no DataLoader, two optimizers, closures, gradient
# accumulation, a process that serves) and the plain DataLoader pipelines.
TRAINING_SHAPES = {"gan_two_optimizers", "getbatch_cpu", "getbatch_waiting", "grad_accumulation_cpu", "lbfgs_healthy",
                   "manual_sgd_healthy", "served_not_trained", "loader_slow_workers", "loader_decode_cpu",
                   # The batch taken between the forward and the backward; frameworks' own loops.
                   "prefetch_store_waiting", "hf_trainer_tokenize_cpu",
                   # Lightning's fit loop and its own DDP launcher (rank 0 starts rank 1).
                   "lightning_ddp_straggler",
                   # Two faults at once: the larger share is named first, the input after it.
                   "faults_io_over_input"}


def cases(mode: str) -> list[object]:
    """Each workload declared for `mode`. Runs that `make test` leaves to `make test-all` (marked
    slow, to stay under 12 minutes): attach runs of a workload with nothing to find that is also
    launched or of a cause another workload already shows in attach mode, launch runs of a cause
    another launched workload already shows (unless it is one of the TRAINING_SHAPES), and most
    compile walks."""
    chosen = []
    shown: set[tuple[str, str | None]] = set()
    for _, d in sorted(DECLARED.items()):
        if mode not in d.modes:
            continue
        healthy_twice = d.cause is None and "launch" in d.modes
        again = (d.playbook, d.cause) in shown
        shown.add((d.playbook, d.cause))
        slow = (mode == "attach" and d.name not in ALWAYS_ATTACHED
                and (healthy_twice or (again and d.cause is not None)))
        slow = slow or (d.playbook == "compile-regression" and d.name not in COMPILE_IN_MAKE_TEST)
        slow = slow or (mode == "launch" and d.name in LAUNCHED_ELSEWHERE)
        slow = slow or (mode == "launch" and again and d.name not in TRAINING_SHAPES)
        chosen.append(pytest.param(d, id=d.name, marks=[pytest.mark.slow] if slow else []))
    return chosen


# A compile walk waits for cold compiles (~15 s a graph here) and relaunches the job for its A/B:
# the job must outlive it.
SLOW_PLAYBOOKS = {"compile-regression": {"FIELDGUIDE_WORKLOAD_SECONDS": "200"}}


# What each mode named for each workload in this run: where both ran, they must agree (the attach
# run, which comes after the launched one in the walks' lane, checks).
NAMED: dict[str, dict[str, tuple[str, str | None]]] = {}



def diagnose(tmp_path: Path, playbook: str, *target: str) -> dict:
    report = tmp_path / "report.json"
    env = SLOW_PLAYBOOKS.get(playbook)
    proc = run_fieldguide("diagnose", "--playbook", playbook, "--report", str(report), *target,
                          timeout=240 if env else 150, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert report.exists(), proc.stderr
    data = json.loads(report.read_text())
    check_report(data)
    expected_status = {"departure": 1, "clean": 0, "inconclusive": 3}[data["verdict"]]
    assert proc.returncode == expected_status, proc.stderr
    return data


# The rank a multi-rank straggler workload makes slow: the walk must name it.
STRAGGLER_RANK = {"ddp_straggler_input": 1, "lightning_ddp_straggler": 1, "ddp_slow_node": 1}


def busy_processes() -> str:
    """The processes using the most CPU now: what else loaded the box when a walk read it wrong."""
    import time

    import psutil

    procs = list(psutil.process_iter(["pid", "name", "cmdline"]))
    for proc in procs:
        try:
            proc.cpu_percent()
        except psutil.Error:
            pass
    time.sleep(1.0)
    rows = []
    for proc in procs:
        try:
            rows.append((proc.cpu_percent(), proc.pid, " ".join(proc.info["cmdline"] or [proc.info["name"]])[:120]))
        except psutil.Error:
            continue
    return "\n".join(f"{cpu:5.0f}% {pid} {cmd}" for cpu, pid, cmd in sorted(rows, reverse=True)[:8])


def assert_found(data: dict, want: workloads.Declaration) -> None:
    NAMED.setdefault(want.name, {})[data["target"]["kind"]] = (
        data["verdict"], (data["first_departure"] or {}).get("cause") or data.get("conclusion"))
    path = json.dumps({"path": data["path"], "ranks": data.get("ranks")}, indent=1)
    if data["verdict"] != want.verdict or (data["first_departure"] or {}).get("cause") != want.cause:
        path += "\nbusy processes after the walk:\n" + busy_processes()
    if want.name in STRAGGLER_RANK:
        slow = STRAGGLER_RANK[want.name]
        assert len(data["ranks"]) == 2, data.get("ranks")
        assert [r["rank"] for r in data["ranks"] if r["verdict"].startswith("slowest")] == [slow], data["ranks"]
        assert data["first_departure"]["summary"].startswith(f"Rank {slow} is the straggler"), data["first_departure"]
    assert data["playbook"] == want.playbook
    assert data["verdict"] == want.verdict, path
    if want.verdict == "clean":
        assert data["conclusion"] == want.conclusion, path
    elif want.verdict == "inconclusive":
        # Not a job the playbook can judge: no cause and no healthy leaf.
        assert data["first_departure"] is None, path
        assert data["conclusion"] is None, path
    else:
        assert data["first_departure"]["cause"] == want.cause, path


# Causes whose reading is the machine's idle cores (more intra-op threads gain only where a core
# is free): the declared verdict presumes the cores this machine has, so the walk runs alone.
READS_IDLE_CORES = {"host.threads_limited"}


def walked(lanes, want: workloads.Declaration, walk) -> dict:  # type: ignore[no-untyped-def]
    """The walk's report; walked again with the machine to itself where it ended too close to call
    beside the other lane's job (make test's two lanes). A busy machine may make a walk undecided,
    never wrong: a cause named beside a neighbour is judged as it stands."""
    if want.cause in READS_IDLE_CORES and lanes.root is not None:
        with lanes.alone():
            return walk()
    data = walk()
    undecided = any("too close to call" in (p.get("note") or "") for p in data["path"])
    beside = ((data.get("contention") or {}).get("oversubscribed_windows") or 0) > 0
    if data["verdict"] == "inconclusive" != want.verdict and undecided and beside and lanes.root is not None:
        with lanes.alone():
            data = walk()
    return data


@pytest.mark.parametrize("want", cases("launch"))
def test_launch(tmp_path: Path, want: workloads.Declaration, lanes) -> None:
    import sys

    data = walked(lanes, want, lambda: diagnose(tmp_path, want.playbook, "--",
                                                *workloads.command(want.name, sys.executable)))
    assert_found(data, want)
    assert data["target"]["kind"] == "launch"
    kinds = check_artifacts(data)
    if want.cause == "host.overhead_bound":  # the windows it was judged on, for speedscope and Perfetto
        assert {"speedscope", "perfetto"} <= kinds, data.get("artifacts")
    if want.playbook == "compile-regression" and want.cause:
        tlparse_the_trace(data, tmp_path)


def tlparse_the_trace(data: dict, tmp_path: Path) -> None:
    """The tlparse command the report prints works with the tlparse on the package index."""
    import shlex
    import shutil
    import subprocess

    traces = [a for a in data.get("artifacts") or [] if a["kind"] == "torch_trace"]
    assert traces, data.get("artifacts")
    tlparse = shutil.which("tlparse", path=str(Path(sys.executable).parent)) or shutil.which("tlparse")
    if tlparse is None:
        pytest.skip("tlparse is not installed (the test extra has it)")
    argv = shlex.split(traces[0]["command"])
    assert argv[0] == "tlparse"
    done = subprocess.run([tlparse, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (Path(argv[argv.index("-o") + 1]) / "index.html").is_file()
    assert data["environment"]["torch"], "the agent reports torch's version"
    # Every launched walk takes the job's start apart: consecutive phases from the spawn on.
    cold = data["cold_start"]
    assert cold["phases"][0]["phase"] == "interpreter" and cold["total_s"] > 0, cold
    assert abs(sum(p["seconds"] for p in cold["phases"]) - cold["total_s"]) <= 0.01 * cold["total_s"] + 0.01, cold


@pytest.mark.parametrize("want", cases("attach"))
def test_attach(tmp_path: Path, want: workloads.Declaration, workload_process, lanes) -> None:
    proc = workload_process(want.name)
    data = walked(lanes, want, lambda: diagnose(tmp_path, want.playbook, "--pid", str(proc.pid)))
    assert_found(data, want)
    assert proc.poll() is None, "an attached job must keep running"
    assert data["target"]["kind"] == "attach"
    # No agent: the nodes that need it say so, and the walk goes on.
    skipped = [p for p in data["path"] if p["status"] == "skip"]
    assert all("launch" in p["note"] or "needs an NVIDIA GPU" in p["note"] for p in skipped), skipped
    # Two eyes on one job: where this run also walked it launched, both named the same verdict and
    # cause (`make test-all` walks every workload declared for both modes).
    named = NAMED[want.name]
    assert named.get("launch", named["attach"]) == named["attach"], named


def test_a_target_that_exits_mid_walk_is_reported_not_a_crash(tmp_path: Path) -> None:
    import sys

    # The job trains for 2 s and exits while the walk is still measuring (its loop window).
    report = tmp_path / "report.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(report), "--",
                          sys.executable, str(workloads.path("healthy_mlp")),
                          env={"FIELDGUIDE_WORKLOAD_SECONDS": "2"}, timeout=120)
    assert "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    # A job that ends is evidence: what it left is judged (healthy_mlp has nothing to find), what needed
    # it alive is skipped with the reason, and the report says how it ended. (host.overhead's profile
    # needs it alive; the stack window taken while it trained stands in for it.)
    assert data["exit"]["code"] == 0 and data["exit"]["exception"] is None, data["exit"]
    assert data["exit"]["steps"] > 3
    assert "exited with status 0" in data["note"]
    assert data["verdict"] == "clean" and proc.returncode == 0, data["path"]
    judged = {step["node"]: step["status"] for step in data["path"]}
    assert judged["target.trains"] == judged["input.data-wait"] == "pass", judged
    assert judged["host.overhead"] in ("pass", "skip"), judged
    skipped = [step for step in data["path"] if step["status"] == "skip"]
    assert all("exited" in step["note"] for step in skipped), skipped
    assert ("not measured on this target" in data["note"]) == bool(skipped), data["note"]


# The loader's wait with nothing measuring it, taken from the same process just before and just
# after the walk (the agent idle: its DataLoader wrapper costs microseconds of a 47 ms wait).
IDLE_S = 6.0


@pytest.mark.alone
def test_a_loaders_wait_reads_under_the_walk_what_it_costs_with_nothing_measuring() -> None:
    """The instrument's cost stays out of its own readings: the data wait the walk measured (its
    loop window, beside its stack sampler) is the wait the same process's loader took while nothing
    measured it just before and just after the walk. One process against itself: this loader's wait
    moves by up to 80% for a second or two at a time on this box, in one process as between two
    (docs/results.md), so a second process timed alone is no baseline."""
    import os
    import time
    from statistics import median

    from fieldguide.agent.inside.rows import StepRow
    from fieldguide.playbook import find_playbook
    from fieldguide.targets import LaunchTarget
    from fieldguide.walk.session import Session, launch_arm, launch_env

    name = "loader_decode_cpu"  # a loader that computes in the main process: what a sampler would slow
    playbook = find_playbook("slow-training")
    target = LaunchTarget(workloads.command(name, sys.executable), env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="90"),
                          arm=launch_arm(playbook), extra_env=launch_env(playbook))
    try:
        assert target.wait_ready(timeout=60, min_steps=3), target.log_tail(20)
        time.sleep(IDLE_S + 2.0)  # past the job's first seconds, which run slower here
        start = time.monotonic()
        data = Session(playbook, target).run().to_json()
        end = time.monotonic()
        time.sleep(IDLE_S)
        conn = target.agent.primary() if target.agent else None
        assert conn is not None
        rows = [StepRow.read(r) for r in conn.steps]
    finally:
        target.close()
    walked = data["evidence"]["input.data-wait"]["values"]["data_wait_ms_median"]
    before = [r.loader_wait_s * 1000 for r in rows if start - IDLE_S <= r.t_end < start]
    after = [r.loader_wait_s * 1000 for r in rows if end < r.t_end <= end + IDLE_S]
    assert len(before) >= 20 and len(after) >= 20, (len(before), len(after))
    # Within what the job did on its own around the walk (the two idle stretches' medians), and
    # 15% and 0.2 ms past them: the framework jobs that once read 20-70% more under the walk than
    # alone would fail it; this box's own slow seconds widen the band only where they were measured.
    low, high = sorted((median(before), median(after)))
    assert 0.85 * low - 0.2 <= walked <= 1.15 * high + 0.2, (walked, low, high)
