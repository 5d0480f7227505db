"""Ranks compared, on constructed per-rank numbers and rows: straggler, communication-bound, one process."""

from __future__ import annotations

import pytest

from fieldguide.analysis.ranks import RankStats, collective_fraction, compare
from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.walk.engine import Walk


def rank(r: int, step_ms: float | None, wait: float, data: float = 0.0, cpu: float | None = None) -> RankStats:
    return RankStats(rank=r, pid=100 + r, host="node-a", steps=50, step_ms=step_ms, data_wait=data,
                     collective_wait=wait, producer_cpu=cpu)


def test_a_straggler_is_the_rank_with_the_longest_own_work_and_the_others_wait():
    ranks = [rank(0, 12.0, 0.85), rank(1, 12.0, 0.10, data=0.6, cpu=0.9), rank(2, 12.0, 0.80), rank(3, 12.0, 0.82)]
    values = compare(ranks)
    assert values["slowest_rank"] == 1
    assert values["own_work_ratio"] == pytest.approx((12 * 0.9) / (12 * 0.18), rel=0.01)
    assert values["others_wait_fraction"] == pytest.approx(0.80)
    assert values["wait_gap"] == pytest.approx(0.70)
    assert "input-bound: 60%" in values["slowest_reading"] and "on the CPU" in values["slowest_reading"]
    assert ranks[1].verdict.startswith("slowest own work") and "waits 85%" in ranks[0].verdict


def test_communication_bound_ranks_wait_alike_and_none_is_slower():
    values = compare([rank(0, 150.0, 0.68), rank(1, 152.0, 0.73)])
    assert values["own_work_ratio"] < 1.3
    assert values["comm_fraction_min"] == pytest.approx(0.68)
    assert values["comm_fraction_max"] == pytest.approx(0.73)
    assert values["comm_fraction_mean"] == pytest.approx(0.705)


def test_uneven_work_is_the_slowest_rank_getting_the_most_elements_per_step():
    ranks = [rank(0, 20.0, 0.05), rank(1, 20.0, 0.5)]
    ranks[0].batch_elements, ranks[1].batch_elements = 2 * 64 * 128, 64 * 128
    ranks[0].steps_per_s = ranks[1].steps_per_s = 50.0
    values = compare(ranks)
    assert values["slowest_rank"] == 0 and values["work_ratio"] == 2.0 and values["slowest_has_most_work"] is True
    assert values["step_rate_ratio"] == 1.0
    assert "work_ratio" not in compare([rank(0, 20.0, 0.05), rank(1, 20.0, 0.5)])  # unknown: not made up


def test_from_outside_shares_stand_for_step_times():
    values = compare([rank(0, None, 0.17), rank(1, None, 0.67)])
    assert values["slowest_rank"] == 0 and "slowest_own_ms" not in values
    assert values["own_work_ratio"] == pytest.approx(0.83 / 0.33, rel=0.01)


def test_one_rank_measured_is_nothing_to_compare():
    assert "own_work_ratio" not in compare([rank(0, 10.0, 0.5), RankStats(1, 101, "a", 0, None, None, None)])


def test_collective_rows_give_the_share_of_the_window_waited():
    # [t_end, collective_s, backward_wait_s, backward_s, calls]: steps of 0.1 s, 0.06 s waited in each.
    rows = [[10.0 + 0.1 * i, 0.01, 0.05, 0.07, 1] for i in range(20)]
    share, steps = collective_fraction(rows, 10.0, 12.0)
    assert steps == 19 and share == pytest.approx(0.6)
    assert collective_fraction(rows[:1], 10.0, 12.0) == (None, 1)


def dist_measurement(**values):
    base = {"world_size": 2, "ranks_seen": 2, "ranks_measured": 2, "ranks_remote": 0, "own_work_ratio": 1.0, "others_wait_fraction": 0.0,
            "wait_gap": 0.0, "slowest_wait_ratio": 1.0,
            "comm_fraction_min": 0.0, "comm_fraction_max": 0.0, "comm_fraction_mean": 0.0}
    return Measurement(probe="dist.ranks", values={**base, **values})


@pytest.mark.parametrize(("values", "cause"), [
    ({"own_work_ratio": 4.5, "others_wait_fraction": 0.85, "wait_gap": 0.53, "slowest_wait_ratio": 0.376,
      "slowest_rank": 0}, "dist.straggler"),
    ({"own_work_ratio": 2.0, "others_wait_fraction": 0.5, "wait_gap": 0.45, "slowest_wait_ratio": 0.1, "work_ratio": 1.0,
      "slowest_has_most_work": True}, "dist.straggler"),
    ({"own_work_ratio": 2.0, "others_wait_fraction": 0.5, "wait_gap": 0.45, "slowest_wait_ratio": 0.1, "work_ratio": 2.0,
      "slowest_has_most_work": True}, "dist.imbalance"),
    # a Lightning DDP rank sleeping 8 ms a step, 1.37x the other's own work (launched): named
    ({"own_work_ratio": 1.374, "others_wait_fraction": 0.3817, "wait_gap": 0.2358, "slowest_wait_ratio": 0.382,
      "work_ratio": 1.0, "slowest_has_most_work": True}, "dist.straggler"),
    ({"own_work_ratio": 1.1, "others_wait_fraction": 0.7, "comm_fraction_min": 0.68, "comm_fraction_mean": 0.7}, "dist.comm_bound"),
    # seen from outside on a communication-bound job: own work 1.4x by noise, but both ranks wait
    ({"own_work_ratio": 1.4, "others_wait_fraction": 0.60, "wait_gap": 0.16, "slowest_wait_ratio": 0.733, "comm_fraction_min": 0.38, "comm_fraction_mean": 0.49},
     "dist.comm_bound"),
    # one attached window of the zoo's communication-bound job: one rank read 33%, the other 44%
    ({"own_work_ratio": 1.2, "others_wait_fraction": 0.44, "wait_gap": 0.11, "slowest_wait_ratio": 0.75, "comm_fraction_min": 0.33,
      "comm_fraction_mean": 0.385}, "dist.comm_bound"),
])
def test_the_walk_checks_ranks_first(values, cause):
    playbook = find_playbook("slow-training")

    def measure(option):
        if option.probe == "training.activity":
            return Measurement(probe=option.probe, values={"trains": True})
        return dist_measurement(**values)

    walk = Walk(playbook, lambda: {"process", "agent", "launch"}, measure)
    walk.run()
    assert walk.departure is not None and walk.departure.cause.id == cause
    assert [r.node for r in walk.path][:2] == ["target.trains", "dist.ranks"]


def test_ranks_that_wait_little_in_collectives_pass_the_comm_node():
    """A healthy 2-rank job read from outside: 17% and 6% in collectives, no straggler."""
    playbook = find_playbook("slow-training")
    walk = Walk(playbook, lambda: {"process"}, lambda option: Measurement(
        probe=option.probe, values={"trains": True}) if option.probe == "training.activity" else dist_measurement(
        own_work_ratio=1.17, others_wait_fraction=0.2, wait_gap=0.14, comm_fraction_min=0.06,
        comm_fraction_max=0.2, comm_fraction_mean=0.13))
    walk.run()
    comm = next(r for r in walk.path if r.node == "dist.comm")
    assert comm.status == "pass", comm


def test_one_process_passes_the_rank_nodes_at_once():
    playbook = find_playbook("slow-training")
    results = {}
    walk = Walk(playbook, lambda: {"process", "agent", "launch"},
                lambda option: dist_measurement() if option.probe == "dist.ranks"
                else Measurement(probe=option.probe, values={"trains": True}))
    for node in ("dist.ranks", "dist.comm"):
        results[node] = walk.run_node(node).status
    assert results == {"dist.ranks": "pass", "dist.comm": "pass"}


def test_a_launchers_ranks_are_found_by_their_environment(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from fieldguide.host.rankfinder import sibling_ranks

    # A launcher with two ranks of one job and a process of another job (a second torchrun).
    launcher = tmp_path / "launcher.py"
    launcher.write_text(
        "import os, subprocess, sys, time\n"
        "kids = []\n"
        "for rank, run in ((1, 'job'), (0, 'job'), (0, 'other')):\n"
        "    env = dict(os.environ, RANK=str(rank), WORLD_SIZE='2', TORCHELASTIC_RUN_ID=run)\n"
        "    kids.append(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'], env=env))\n"
        "print('up', flush=True)\n"
        "time.sleep(30)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")}
    proc = subprocess.Popen([sys.executable, str(launcher)], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.3)
        ranks = sibling_ranks(proc.pid)
        assert [r["rank"] for r in ranks] == [0, 1] and all(r["world_size"] == 2 for r in ranks)
        # From a rank, its siblings of the same job (not the other job's rank 0).
        assert [r["pid"] for r in sibling_ranks(ranks[1]["pid"])] == [r["pid"] for r in ranks]
        alone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
        try:
            assert sibling_ranks(alone.pid) == []  # not a rank, no ranks below: one process
        finally:
            alone.kill()
            alone.wait()
    finally:
        import signal

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_rank_0_that_started_the_other_ranks_itself_is_found(tmp_path):
    """Lightning's DDP: rank 0 is the script itself, with no rank in its environment; it re-runs the
    script for local rank 1 with LOCAL_RANK, NODE_RANK, WORLD_SIZE and MASTER_PORT (no RANK)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from fieldguide.agent.inside.capabilities.collectives import global_rank
    from fieldguide.host.rankfinder import sibling_ranks

    script = tmp_path / "fit.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "if 'LOCAL_RANK' not in os.environ:\n"
        "    env = dict(os.environ, LOCAL_RANK='1', NODE_RANK='0', WORLD_SIZE='2', MASTER_ADDR='127.0.0.1',\n"
        "               MASTER_PORT='43147')\n"
        "    subprocess.Popen([sys.executable, sys.argv[0]], env=env)\n"
        "    print('up', flush=True)\n"
        "time.sleep(30)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK")}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.3)
        ranks = sibling_ranks(proc.pid)
        assert [(r["rank"], r["world_size"]) for r in ranks] == [(0, 2), (1, 2)] and ranks[0]["pid"] == proc.pid
        assert [r["pid"] for r in sibling_ranks(ranks[1]["pid"])] == [proc.pid, ranks[1]["pid"]]  # from rank 1
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert global_rank({"LOCAL_RANK": "1", "WORLD_SIZE": "2"}) == 1
    assert global_rank({"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}) == 3
    assert global_rank({"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "4"}) is None  # node size unknown
    assert global_rank({"LOCAL_RANK": "0", "WORLD_SIZE": "1"}) is None and global_rank({"RANK": "5"}) == 5


def test_off_cpu_and_run_queue_shares_of_a_window() -> None:
    from fieldguide.probes.contention import off_cpu_shares

    # 4 s: 1.6 s on a CPU, 1.2 s runnable but the cores busy, 1.2 s blocked. The wait is judged on
    # the whole time off the CPU (gloo's threads take the cores the main thread waits for); the
    # run-queue share is read beside it.
    off_cpu, queued = off_cpu_shares((10.0, 5.0), (11.6, 6.2), 4.0)
    assert off_cpu == pytest.approx(0.6) and queued == pytest.approx(0.3)
    # Without schedstat (psutil's CPU time alone): no run-queue reading.
    assert off_cpu_shares((10.0, None), (11.6, None), 4.0) == (pytest.approx(0.6), None)
    assert off_cpu_shares(None, (11.6, 6.2), 4.0) == (None, None)


def test_main_thread_times_read_this_process() -> None:
    import os

    from fieldguide.probes.contention import main_thread_times

    first = main_thread_times(os.getpid())
    sum(i * i for i in range(200_000))  # some CPU on the main thread
    second = main_thread_times(os.getpid())
    assert first is not None and second is not None and second[0] > first[0]
    if os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        assert first[1] is not None and second[1] is not None and second[1] >= first[1]


def test_a_rank_that_waits_for_a_cpu_says_so_in_its_verdict() -> None:
    ranks = [RankStats(rank=0, pid=1, host="h", steps=0, step_ms=None, data_wait=0.0, collective_wait=0.1,
                       run_queue=0.25),
             RankStats(rank=1, pid=2, host="h", steps=0, step_ms=None, data_wait=0.0, collective_wait=0.12,
                       run_queue=0.02)]
    values = compare(ranks)
    assert values["run_queue_max"] == 0.25
    assert ranks[0].verdict.endswith("25% of its time runnable, waiting for a CPU (the node's cores are busy)")
    assert "waiting for a CPU" not in ranks[1].verdict
    assert ranks[0].row()["run_queue"] == 0.25


# --- margins: a healthy job's readings that wobble past a threshold are measured again --------------

def test_rank_margins_add_each_ranks_wait_margin_in_quadrature():
    from fieldguide.analysis.ranks import compare_margins

    ranks = [RankStats(rank=0, pid=1, host="h", steps=0, step_ms=None, data_wait=0.0, collective_wait=0.20,
                       wait_margin=0.06),
             RankStats(rank=1, pid=2, host="h", steps=0, step_ms=None, data_wait=0.0, collective_wait=0.46,
                       wait_margin=0.08)]
    values = compare(ranks)
    margins = compare_margins(ranks, values)
    assert values["slowest_rank"] == 0
    assert margins["others_wait_fraction"] == pytest.approx(0.08)
    assert margins["wait_gap"] == pytest.approx(0.1)
    assert margins["comm_fraction_mean"] == pytest.approx(0.05)
    # (1 - 0.2) / (1 - 0.46) = 1.48; its relative margin from both own shares
    assert margins["own_work_ratio"] == pytest.approx(1.4815 * ((0.06 / 0.8) ** 2 + (0.08 / 0.54) ** 2) ** 0.5, rel=1e-3)
    ranks[1].wait_margin = None  # a rank without a margin: none claimed for the comparison
    assert compare_margins(ranks, values) == {}
    assert "wait_margin" not in ranks[0].row()


def test_a_ranks_wait_from_outside_carries_its_sampling_margin():
    from fieldguide.probes.dist import collective_margin, waited_share

    m = Measurement(probe="stacks.sample", values={"samples": 80}, evidence={"main_categories": {
        "collective": {"samples": 30, "on_cpu": 2}, "compute": {"samples": 50, "on_cpu": 48}}})
    waited, margin = waited_share(m, off_cpu=0.4)
    assert waited == pytest.approx(0.4 * 28 / 30)
    assert 0.0 < margin < 0.15
    fewer = Measurement(probe="stacks.sample", values={"samples": 8}, evidence={"main_categories": {
        "collective": {"samples": 3, "on_cpu": 0}, "compute": {"samples": 5, "on_cpu": 5}}})
    assert waited_share(fewer, off_cpu=0.4)[1] > margin  # fewer idle samples, wider
    even = [[10.0 + i * 0.1, 0.06, 0.0] for i in range(20)]
    assert collective_margin(even, 10.0, 12.0) == pytest.approx(0.0)
    uneven = [[10.0 + i * 0.1, 0.02 + 0.08 * (i % 2), 0.0] for i in range(20)]
    assert 0.0 < collective_margin(uneven, 10.0, 12.0) < 0.2
    assert collective_margin(even[:2], 10.0, 12.0) is None


def test_a_healthy_job_read_once_as_a_straggler_is_measured_again_and_not_named():
    """Two ranks filling a busy box: one window reads rank 0's own work 1.35x the other's with both
    past the wait thresholds (as 3 of 12 attached walks once did); within its margin, the node
    measures again over twice the window, which reads the ranks alike."""
    playbook = find_playbook("slow-training")
    windows = []

    def measure(option):
        if option.probe != "dist.ranks":
            return Measurement(probe=option.probe, values={"trains": True})
        windows.append(option.params.get("seconds"))
        if len(windows) == 1:
            return Measurement(probe="dist.ranks", values={**dist_measurement().values, "own_work_ratio": 1.35,
                               "others_wait_fraction": 0.46, "wait_gap": 0.27, "slowest_wait_ratio": 0.41,
                               "comm_fraction_mean": 0.33},
                               margins={"own_work_ratio": 0.2, "others_wait_fraction": 0.08, "wait_gap": 0.11,
                                        "slowest_wait_ratio": 0.2,
                                        "comm_fraction_mean": 0.05})
        return dist_measurement(own_work_ratio=1.05, others_wait_fraction=0.3, wait_gap=0.03,
                                comm_fraction_mean=0.2)

    walk = Walk(playbook, lambda: {"process"}, measure)
    result = walk.run_node("dist.ranks")
    assert result.status == "pass" and "measured again" in result.note
    assert windows[:2] == [None, 8.0]


def test_a_straggler_clear_of_its_margins_is_named_at_once():
    playbook = find_playbook("slow-training")
    walk = Walk(playbook, lambda: {"process"}, lambda option: Measurement(
        probe="dist.ranks", values={**dist_measurement().values, "own_work_ratio": 2.4, "others_wait_fraction": 0.6,
                                    "wait_gap": 0.5, "slowest_wait_ratio": 0.17, "slowest_rank": 1},
        margins={"own_work_ratio": 0.3, "others_wait_fraction": 0.08, "wait_gap": 0.11})
        if option.probe == "dist.ranks" else Measurement(probe=option.probe, values={"trains": True}))
    result = walk.run_node("dist.ranks")
    assert result.status == "depart" and "measured again" not in result.note


def test_run_queue_time_behind_other_processes_is_no_wait_for_the_ranks():
    """A healthy 2-rank job beside a busy core once read 51% and 47% 'in collectives' with 40% of
    each rank's time in the run queue, and was named communication-bound. The run-queue time
    spent behind processes that are not the job's is taken out of the wait, and a quarter of it
    is in the margin."""
    from fieldguide.probes.contention import foreign_share
    from fieldguide.probes.dist import waited_share

    m = Measurement(probe="stacks.sample", values={"samples": 80}, evidence={"main_categories": {
        "collective": {"samples": 45, "on_cpu": 5}, "compute": {"samples": 35, "on_cpu": 35}}})
    alone, alone_margin = waited_share(m, off_cpu=0.51)
    busy, busy_margin = waited_share(m, off_cpu=0.51, behind_others=0.40 * 0.45)
    assert alone == pytest.approx(0.51)
    assert busy == pytest.approx(0.33) and busy_margin > alone_margin + 0.03
    # 10 s of the box busy, 5.5 of them the job's: 45% was someone else's
    assert foreign_share(5.5, 1000.0, 1010.0) == pytest.approx(0.45)
    assert foreign_share(5.5, None, 1010.0) is None
    assert foreign_share(12.0, 1000.0, 1010.0) == 0.0  # the job's threads read more than the box: none
    from fieldguide.probes.contention import cpu_seconds_between

    # a worker born inside the window (its whole life) and one that ended are left out
    assert cpu_seconds_between({(1, 1): 10**9, (1, 2): 5 * 10**9}, {(1, 1): 3 * 10**9, (7, 7): 9 * 10**9}) == 2.0


def test_the_runner_does_not_widen_margins_a_probe_weighed_against_contention_itself():
    from fieldguide.probes.contention import margin_factor

    assert margin_factor({"cpu_wait_fraction": 0.4}) > 1.3
    from fg_fakes import record_contention

    m = Measurement(probe="dist.ranks", values={}, margins={"wait_gap": 0.1}, contention_in_margins=True)
    record_contention(m, {"cpu_wait_fraction": 0.4})
    assert m.margins == {"wait_gap": 0.1}
    other = Measurement(probe="stacks.sample", values={}, margins={"x": 0.1})
    record_contention(other, {"cpu_wait_fraction": 0.4})
    assert other.margins["x"] == pytest.approx(0.1 * margin_factor({"cpu_wait_fraction": 0.4}))


def test_a_launched_ranks_producer_share_is_of_the_time_its_thread_could_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """dist.ranks in launch mode reads each rank's loop as loop.steps does: main-process loading
    that spent half the window waiting for a core is CPU work (0.45 of its wait on the CPU, 0.9
    of the time it could run), and the straggler's reading says so."""
    import collections
    import time
    import types

    from fieldguide.agent.inside.rows import CollectiveRow, StepRow
    from fieldguide.probes import contention
    from fieldguide.probes.base import ProbeContext
    from fieldguide.probes.dist import RankComparison

    def conn(rank: int, pid: int) -> types.SimpleNamespace:
        now = time.monotonic()
        rows = collections.deque(StepRow(now + 0.05 * i, 0.07, 0.06, "o", 0.061, 0.03, 0.027, 1, 0, 1, 0.0, 32)
                                 for i in range(1, 30))
        waits = types.SimpleNamespace(items=collections.deque(CollectiveRow(r.t_end, 0.01, 0.0, 0.0, 1) for r in rows))
        return types.SimpleNamespace(rank=rank, pid=pid, world_size=2, identity={}, steps=rows, steps_total=len(rows), iters=[],
                                     stream=lambda capability, name: waits)

    conns = [conn(0, 101), conn(1, 102)]
    agent = types.SimpleNamespace(ranks=lambda: conns, primary=lambda: conns[0], prefer=lambda pid: None)
    target = types.SimpleNamespace(agent=agent, alive=lambda: True, pid=101)
    calls: dict[int, int] = collections.Counter()

    def thread_times(pid: int) -> tuple[float, float]:
        calls[pid] += 1
        return (0.0, 0.0) if calls[pid] == 1 else (0.0, 0.5)  # half the 1 s window runnable, off a core

    def producer_share() -> float:
        calls.clear()
        m = RankComparison().run(ProbeContext(target=target), seconds=1.0)  # type: ignore[arg-type]
        assert m.ok, m.unavailable
        return float(m.values["slowest_producer_cpu"])

    monkeypatch.setattr(contention, "main_thread_times", lambda pid: None)
    assert producer_share() == pytest.approx(0.45, abs=0.01)
    monkeypatch.setattr(contention, "main_thread_times", thread_times)
    assert producer_share() > 0.8


def test_the_launched_ranks_window_opens_once_every_rank_has_done_its_first_steps() -> None:
    """A rank still starting (importing, DDP's first all-reduce) while the other waits for it is no
    steady step: the window waits until every rank has done WARMUP_STEPS steps."""
    import threading
    import time
    import types

    from fieldguide.probes.base import ProbeContext
    from fieldguide.probes.dist import WARMUP_STEPS, RankComparison

    fast = types.SimpleNamespace(steps_total=50)
    slow = types.SimpleNamespace(steps_total=0)
    agent = types.SimpleNamespace(ranks=lambda: [fast, slow])
    ctx = ProbeContext(target=types.SimpleNamespace(alive=lambda: True))  # type: ignore[arg-type]

    def starts() -> None:
        time.sleep(0.3)
        slow.steps_total = WARMUP_STEPS

    threading.Thread(target=starts).start()
    began = time.monotonic()
    assert RankComparison._warm_ranks(ctx, agent, 5.0) == [fast, slow]
    assert 0.25 <= time.monotonic() - began < 2.0
    slow.steps_total = 0
    began = time.monotonic()
    RankComparison._warm_ranks(ctx, agent, 0.3)  # never warm: it gives up at the bound
    assert time.monotonic() - began < 1.0
