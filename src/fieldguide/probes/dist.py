"""The ranks of a multi-rank job, side by side: step time, input, and the wait in collectives.

Launch mode: every rank's agent (torchrun starts each rank's interpreter with fieldguide's
environment, so each loads the agent and says its RANK). Attach mode: the sibling ranks are
found by their environment (RANK under the same TORCHELASTIC_RUN_ID or MASTER_ADDR:PORT), and
each is sampled with py-spy: idle samples inside torch.distributed or inside backward() (where
DDP waits for the other ranks' gradients) are the wait in collectives. A process that is not
a rank of a multi-rank job is one rank: nothing to compare, said as world_size 1.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from typing import Any

from fieldguide.agent.inside.capabilities.collectives import node_rank_of
from fieldguide.analysis.ranks import (
    JobIdentity,
    RankStats,
    collective_fraction,
    compare,
    compare_margins,
    job_of,
    step_waits,
)
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext
from fieldguide.probes.uncertainty import ratio_margin, share_margin

# Each rank sampled twice (idle and on-CPU): 80 samples each in 4 s. At 10 Hz one rank's share of
# the wait moved by up to 0.15 between windows; non-blocking py-spy at 20 Hz costs a job nothing measurable.
RANK_SAMPLE_HZ = 20
# Of the run-queue time taken out of a rank's wait as spent behind other processes, the share
# added to its margin (waited_share).
SPLIT_UNCERTAINTY = 0.25
# As loop.steps leaves them out: a rank's first steps (DDP's first buckets, lazy init, a rank
# still importing while the other waits in the first all-reduce) are no steady step. The window
# opens once every rank has done these many, or after WARMUP_WAIT_S at most.
WARMUP_STEPS = 3
WARMUP_WAIT_S = 20.0
SINGLE = {"world_size": 1, "ranks_seen": 1, "own_work_ratio": 1.0, "others_wait_fraction": 0.0, "wait_gap": 0.0,
          "comm_fraction_min": 0.0, "comm_fraction_max": 0.0, "comm_fraction_mean": 0.0}


@register
class RankComparison(Probe):
    id = "dist.ranks"
    evidence_kinds = (*ev.STACK_KINDS, ev.RANKS, ev.TABLE, ev.JOB)
    title = "Every rank side by side: own work, input, and the wait in collectives"
    needs = frozenset({NEEDS_PROCESS})
    reads_history = True
    params = {"seconds": 4.0}
    values = {"world_size": "", "ranks_seen": "", "ranks_measured": "", "slowest_rank": "", "slowest_own_ms": "ms",
              "others_own_ms": "ms", "own_work_ratio": "x", "slowest_wait_fraction": "fraction",
              "others_wait_fraction": "fraction", "wait_gap": "fraction", "slowest_wait_ratio": "x", "comm_fraction_min": "fraction",
              "comm_fraction_max": "fraction",
              "comm_fraction_mean": "fraction",
              "slowest_data_wait": "fraction", "slowest_producer_cpu": "fraction", "slowest_reading": "",
              "step_ms_median": "ms", "work_ratio": "x", "slowest_has_most_work": "", "step_rate_ratio": "x",
              "run_queue_max": "fraction", "foreign_cpu_share": "fraction", "ranks_remote": ""}

    def run(self, ctx: ProbeContext, seconds: float = 4.0) -> Measurement:
        agent = getattr(ctx.target, "agent", None)
        if agent is not None:
            return self._from_agents(ctx, agent, seconds)
        from fieldguide.host.rankfinder import sibling_ranks

        pid = ctx.target.pid
        if pid is None:
            return self.cannot("no target process")
        ranks = sibling_ranks(pid)
        if not ranks or (len(ranks) < 2 and ranks[0]["world_size"] <= 1):
            return self.measurement(values=dict(SINGLE), provenance="the process's environment: no RANK/WORLD_SIZE "
                                    "of a multi-rank job (one process, nothing to compare)")
        return self._from_stacks(ctx, ranks, seconds)

    def _from_agents(self, ctx: ProbeContext, agent: Any, seconds: float) -> Measurement:
        from fieldguide.probes.contention import main_thread_times, off_cpu_shares
        from fieldguide.probes.loop import loop_values, step_rows

        conns = agent.ranks()
        primary = agent.primary()
        world = max([c.world_size for c in conns] + [primary.world_size if primary is not None else 1])
        if world <= 1:
            return self.measurement(values=dict(SINGLE), provenance="agent: the job's environment has no "
                                    "WORLD_SIZE above 1 (one process, nothing to compare)")
        self.reading(ctx, status=f"waiting for {WARMUP_STEPS} steps on each rank")
        conns = self._warm_ranks(ctx, agent, min(WARMUP_WAIT_S, max(ctx.budget_left / 4, 1.0))) or conns
        started = time.monotonic()
        threads_before = {c.pid: main_thread_times(c.pid) for c in conns if c.pid}
        seconds = max(1.0, min(seconds, ctx.budget_left))
        self.reading(ctx, elapsed=0.0, of=seconds, status=f"timing {len(conns)} of {world} ranks")
        ctx.sleep(seconds)
        end = time.monotonic()
        conns = agent.ranks()
        host = socket.gethostname()
        stats = []
        for conn in conns:
            steps = list(conn.steps)
            # As loop.steps does: a rank's producer share is of the time its thread could run.
            _, run_queue = off_cpu_shares(threads_before.get(conn.pid),
                                          main_thread_times(conn.pid) if conn.pid else None, end - started)
            loop, _ = loop_values(steps, conn.iters, started, end, conn.steps_total - len(steps),
                                  run_queue_share=run_queue)
            collectives = list(conn.stream("collectives", "steps").items)
            waited, _ = collective_fraction(collectives, started, end)
            window = [r for r in step_rows(steps) if started <= r.t_end <= end]
            elements = [r.batch_elements for r in window if r.batch_elements]
            stats.append(RankStats(rank=conn.rank, pid=conn.pid, host=host, node_rank=node_rank_of(conn.identity),
                                   steps=loop.get("steps") or 0,
                                   step_ms=loop.get("step_ms_median"), data_wait=loop.get("data_wait_fraction"),
                                   collective_wait=waited, producer_cpu=loop.get("producer_cpu_fraction"),
                                   batch_elements=statistics.median(elements) if elements else None,
                                   steps_per_s=len(window) / (end - started) if window else None,
                                   wait_margin=collective_margin(collectives, started, end)))
        measured = self._judged(stats, world, time.monotonic() - started,
                                f"agent in each rank, {seconds:.0f} s window: steps from the loop hooks, collectives "
                                "timed around torch.distributed calls and, with CPU tensors, the off-CPU part of "
                                "backward() (DDP's gradient all-reduce)",
                                job_of(conns[0].identity if conns else {}, world))
        slowest = next((s for s in stats if s.rank == measured.values.get("slowest_rank")), None)
        if slowest is not None and slowest.pid is not None:
            agent.prefer(slowest.pid)  # the rest of the walk measures the rank that sets the pace
            measured.provenance += f"; the nodes after this one measure rank {slowest.rank} (pid {slowest.pid})"
        return measured

    @staticmethod
    def _warm_ranks(ctx: ProbeContext, agent: Any, most: float) -> list[Any]:
        """The ranks once every one has done WARMUP_STEPS steps (at most `most` seconds later)."""
        deadline = time.monotonic() + most
        conns = list(agent.ranks())
        while conns and any(c.steps_total < WARMUP_STEPS for c in conns) and time.monotonic() < deadline:
            if not ctx.sleep(0.1):
                break
            conns = list(agent.ranks())
        return conns

    def _from_stacks(self, ctx: ProbeContext, ranks: list[dict[str, Any]], seconds: float) -> Measurement:
        started = time.monotonic()
        seconds = max(2.0, min(seconds, ctx.budget_left))
        self.reading(ctx, elapsed=0.0, of=seconds, status=f"sampling {len(ranks)} ranks with py-spy")
        from fieldguide.probes.contention import (
            box_busy_seconds,
            cpu_seconds_between,
            foreign_share,
            main_thread_times,
            off_cpu_shares,
            tree_cpu,
        )

        pids = [r["pid"] for r in ranks]
        times_before = {r["rank"]: main_thread_times(r["pid"]) for r in ranks}
        job_before, box_before = tree_cpu(pids), box_busy_seconds()
        wall_before = time.monotonic()
        results = self._sample_ranks(ctx, ranks, seconds)
        wall = time.monotonic() - wall_before
        foreign = foreign_share(cpu_seconds_between(job_before, tree_cpu(pids)), box_before, box_busy_seconds())
        off_cpu: dict[int, float] = {}
        queued: dict[int, float] = {}
        for r in ranks:
            away, run_queue = off_cpu_shares(times_before[r["rank"]], main_thread_times(r["pid"]), wall)
            if away is not None:
                off_cpu[r["rank"]] = away
            if run_queue is not None:
                queued[r["rank"]] = run_queue
        stats = []
        for rank in ranks:
            m = results.get(rank["rank"])
            if m is None or not m.ok:
                stats.append(RankStats(rank=rank["rank"], pid=rank["pid"], host=rank["host"], node_rank=rank.get("node_rank"),
                                       steps=0,
                                       step_ms=None, data_wait=None, collective_wait=None))
                continue
            behind_others = (queued.get(rank["rank"]) or 0.0) * (foreign or 0.0)
            waited, margin = waited_share(m, off_cpu.get(rank["rank"]), behind_others)
            # No step times from outside: ranks in lockstep share one step length, so each rank's
            # sampled shares are compared (its own work = the part it is not waiting).
            stats.append(RankStats(rank=rank["rank"], pid=rank["pid"], host=rank["host"], node_rank=rank.get("node_rank"),
                                   steps=0, step_ms=None,
                                   data_wait=m.values.get("data_wait_fraction"),
                                   collective_wait=min(waited, 1.0), producer_cpu=m.values.get("producer_cpu_fraction"),
                                   run_queue=queued.get(rank["rank"]), wait_margin=margin,
                                   beside=beside_the_model(m.evidence.get("budget"))))
        measured = self._judged(stats, max(r["world_size"] for r in ranks), time.monotonic() - started,
                            f"each rank's main-thread CPU and run-queue time (/proc schedstat, else psutil's CPU time) and "
                            f"py-spy ({seconds:.0f} s at {RANK_SAMPLE_HZ} Hz, --idle and on-CPU): the time off the CPU, in "
                            "the share of idle samples inside torch.distributed or backward(), is the wait for the other "
                            "ranks (the run-queue time is shown per rank); shares of each rank's time (step times "
                            "need the agent: launch mode)",
                            job_of(ranks[0].get("identity") or {}, max(r["world_size"] for r in ranks)))
        if foreign is not None:
            measured.values["foreign_cpu_share"] = round(foreign, 3)
            measured.provenance += (f"; {foreign:.0%} of the machine's busy CPU was not the job's: that share of each "
                                    "rank's run-queue time is waiting behind other processes, not for the other ranks")
        measured.contention_in_margins = foreign is not None
        return measured

    def _sample_ranks(self, ctx: ProbeContext, ranks: list[dict[str, Any]], seconds: float) -> dict[int, Measurement]:
        """Each rank's stack shares: one pair of samplers per rank, rooted at the rank (its
        DataLoader workers included; without workers, not polling for subprocesses, which is half
        a sampler's CPU: 0.04 against 0.08-0.09 CPU-s over 4 s at 20 Hz). Not through their launcher: `--subprocesses` there samples
        the launcher too, and cost 4x one rank's sampler (0.23 against 0.06 CPU-s over 5 s at
        20 Hz, two ranks): on a node whose cores the ranks fill, that CPU is the job's."""
        from fieldguide.host.access import py_spy_path
        from fieldguide.probes.stack_recording import record_stacks
        from fieldguide.probes.stacks import read_samples, stack_values

        spy = py_spy_path()
        if spy is None:
            return {r["rank"]: self.cannot("py-spy is not installed (pip install py-spy)") for r in ranks}
        groups = [(r["pid"], [r]) for r in ranks]
        results: dict[int, Measurement] = {}

        def sample(root: int, members: list[dict[str, Any]]) -> None:
            texts, errors, _ = record_stacks(spy, root, seconds, RANK_SAMPLE_HZ, ctx.cancelled.wait,
                                             subprocesses=has_children(root))
            for r in members:
                values, evidence = stack_values(*read_samples(texts, r["pid"]))
                results[r["rank"]] = (self.measurement(values=values, evidence=evidence) if values["samples"] else
                                      self.cannot("py-spy saw no samples of its main thread: "
                                                  + (errors["all"].strip().splitlines() or ["?"])[-1]))

        threads = [threading.Thread(target=sample, args=group, daemon=True) for group in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 15)
        return results

    def _judged(self, stats: list[RankStats], world: int, seconds: float, provenance: str,
                job: JobIdentity | None = None) -> Measurement:
        values = compare(stats)
        values["world_size"] = world
        # Ranks of the job on other nodes: this walk cannot see them, only its ranks' wait for them.
        values["ranks_remote"] = max(world - len(stats), 0)
        margins = compare_margins(stats, values)
        missing = {}
        if "own_work_ratio" not in values:
            missing["own_work_ratio"] = f"fewer than 2 of {world} ranks measured ({len(stats)} found)"
        if "work_ratio" not in values:
            missing["work_ratio"] = ("each rank's batch is read by the agent from its forward's inputs (launch mode)"
                                     if all(s.step_ms is None for s in stats) else "a rank's forward took no tensor")
        rows = [s.row() for s in sorted(stats, key=lambda s: s.rank)]
        identity = job if job is not None else job_of({}, world)
        return self.measurement(values=values, missing=missing, seconds=seconds, provenance=provenance, margins=margins,
                                evidence={"job": identity, "ranks": rows, "table": [
                                    {"rank": r["rank"], "pid": r["pid"], "step_ms": r["step_ms"],
                                     "data_wait": r["data_wait"], "collective_wait": r["collective_wait"],
                                     "verdict": r["verdict"]} for r in rows]})


BESIDE_SHOWN = 0.1  # a rank's largest share outside the model's own work, named from this size


def beside_the_model(budget: Any) -> str | None:
    """A rank's largest share of its step outside the model's own work, from its step budget:
    "sleeping at on_step_end (train.py:12), 33%"; None when none reaches a tenth."""
    rows = [r for r in budget or [] if isinstance(r, dict) and r.get("avoidable") and r.get("part") != "collective"]
    top = max(rows, key=lambda r: float(r.get("share") or 0.0), default=None)
    if top is None or float(top.get("share") or 0.0) < BESIDE_SHOWN:
        return None
    at = f" at {top['at']}" if top.get("at") else ""
    return f"{top.get('label') or top.get('part')}{at}, {float(top['share']):.0%}"


def has_children(pid: int) -> bool:
    """Whether a rank has processes of its own (DataLoader workers) to sample with it; a rank
    whose children cannot be read is sampled with them."""
    import psutil

    try:
        return bool(psutil.Process(pid).children())
    except psutil.Error:
        return True


def waited_share(m: Measurement, off_cpu: float | None, behind_others: float = 0.0) -> tuple[float, float]:
    """A rank's wait for the others, from outside, and its ±: the share of its time its main
    thread was off the CPU (exact, from its CPU time), times the share of its idle samples inside
    torch.distributed or backward() (where DDP waits for the other ranks' gradients; binomial in
    the idle samples). Without the CPU time, the idle samples alone.

    `behind_others`: the share of its time it sat runnable behind processes that are not the
    job's (a busy machine). Run-queue time behind the job's own threads stays in the wait (with
    gloo, the communication's threads take the cores the main thread waits for); behind another
    user's job it is no wait for the ranks, and is taken out. The split is by CPU share: the
    scheduler shares a core evenly among runnable threads of equal priority (the job's, another
    user's), not exactly; a quarter of what is taken out is added to the margin."""
    from fieldguide.probes.stack_categories import BACKWARD, COLLECTIVE

    categories = m.evidence.get("main_categories", {})
    idle = {c: max(v.get("samples", 0) - v.get("on_cpu", 0), 0) for c, v in categories.items()}
    in_collectives = idle.get(COLLECTIVE, 0) + idle.get(BACKWARD, 0)
    total_idle = sum(idle.values())
    if off_cpu is not None and total_idle:
        share = in_collectives / total_idle
        away = max(off_cpu - behind_others, 0.0)
        margin = away * share_margin(share, total_idle) + SPLIT_UNCERTAINTY * min(behind_others, off_cpu) * share
        return float(min(away * share, 1.0)), margin
    total = m.values.get("samples") or 0
    if not total:
        return 0.0, 1.0
    return float(min(in_collectives / total, 1.0)), share_margin(in_collectives / total, total)


def collective_margin(rows: list[list[Any]], window_start: float, window_end: float) -> float | None:
    """± of `collective_fraction` over the same rows: the steps' own spread (a ratio estimator)."""
    waits, spans = step_waits(rows, window_start, window_end)
    return ratio_margin(waits, spans)
