"""Ranks of a multi-rank job compared: whose own work sets the pace, and who waits for whom.

Each rank's step splits into its own work (compute, input, anything between steps) and the time
it waits inside collectives for the others. In data-parallel training every rank waits in each
step's all-reduce for the slowest: a straggler shows as one rank with the longest own work and
the others waiting; a communication-bound job as every rank waiting alike. Pure: no I/O.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any, TypedDict, cast

from fieldguide.agent.inside.rows import CollectiveRow


class RankRow(TypedDict, total=False):
    """One rank of a multi-rank job as a report carries it (RankStats.row)."""

    rank: int
    node_rank: int | None
    pid: int | None
    host: str
    steps: int
    step_ms: float | None
    own_ms: float | None
    data_wait: float | None
    collective_wait: float | None
    producer_cpu: float | None
    batch_elements: float | None
    steps_per_s: float | None
    run_queue: float | None
    verdict: str


class JobIdentity(TypedDict):
    """Which multi-rank job a report's ranks belong to: `report merge` joins only one job's reports."""

    id: str | None  # torchrun's TORCHELASTIC_RUN_ID, else Slurm's job and step
    master: str | None  # MASTER_ADDR:MASTER_PORT, the rendezvous
    world_size: int


def job_of(identity: dict[str, str], world: int) -> JobIdentity:
    """The job identity from a rank's identity (agent/inside/capabilities/collectives.job_identity)."""
    master = (f"{identity['MASTER_ADDR']}:{identity.get('MASTER_PORT', '')}"
              if identity.get("MASTER_ADDR") else None)
    return {"id": identity.get("JOB_ID") or None, "master": master, "world_size": world}


RUN_QUEUE_SAID = 0.1  # a rank runnable but waiting for a CPU this much of the time: said in its verdict


@dataclass
class RankStats:
    rank: int
    pid: int | None
    host: str
    steps: int
    step_ms: float | None  # median
    data_wait: float | None  # fraction of the step: waiting for or producing input
    collective_wait: float | None  # fraction of the step inside collectives (waiting for the others)
    producer_cpu: float | None = None  # of the input time, on the CPU (producing, not waiting)
    batch_elements: float | None = None  # median elements of the first forward's first tensor per step
    steps_per_s: float | None = None
    run_queue: float | None = None  # fraction of the time runnable but waiting for a CPU (the node's cores busy)
    verdict: str = ""  # this rank's own reading, filled by compare()
    node_rank: int | None = None  # which node of the job (torchrun's GROUP_RANK, NODE_RANK, SLURM_NODEID)
    wait_margin: float | None = None  # ± of collective_wait, from its window (samples or steps' spread)
    # Its largest share outside the model's own work, from its step budget ("sleeping at
    # on_step_end (train.py:12), 33%"): what a straggler does that the others do not.
    beside: str | None = None

    @property
    def own_ms(self) -> float | None:
        if self.step_ms is None or self.collective_wait is None:
            return None
        return self.step_ms * (1.0 - self.collective_wait)

    @property
    def own_share(self) -> float | None:
        """The part of its time a rank is not waiting for the others (from outside: no step times)."""
        return None if self.collective_wait is None else 1.0 - self.collective_wait

    def row(self) -> RankRow:
        row: Any = asdict(self)
        row.pop("wait_margin")  # in the measurement's margins, not the report's rank rows
        row.pop("beside")  # in its verdict's words
        row["own_ms"] = None if self.own_ms is None else round(self.own_ms, 3)
        for key in ("step_ms",):
            row[key] = None if row[key] is None else round(row[key], 3)
        for key in ("data_wait", "collective_wait", "producer_cpu", "run_queue"):
            row[key] = None if row[key] is None else round(row[key], 4)
        row["steps_per_s"] = None if self.steps_per_s is None else round(self.steps_per_s, 2)
        row["batch_elements"] = None if self.batch_elements is None else round(self.batch_elements)
        return cast(RankRow, row)


def collective_fraction(rows: list[Any], window_start: float, window_end: float) -> tuple[float | None, int]:
    """From the collectives capability's rows (`CollectiveRow`): the share of the window's steps
    spent waiting in collectives, and the steps counted."""
    chosen = _in_window(rows, window_start, window_end)
    waits, spans = _waits(chosen)
    if not spans:  # one row or none in the window: no step to measure
        return None, len(chosen)
    total = sum(spans)
    return (min(sum(waits) / total, 1.0) if total > 0 else None), len(spans)


def step_waits(rows: list[Any], window_start: float, window_end: float) -> tuple[list[float], list[float]]:
    """Each step's wait in collectives and its length, for the collectives rows in the window
    (a step spans from the row before it to its own)."""
    return _waits(_in_window(rows, window_start, window_end))


def _in_window(rows: list[Any], window_start: float, window_end: float) -> list[CollectiveRow]:
    return [r for r in map(CollectiveRow.read, rows) if window_start <= r.t_end <= window_end]


def _waits(chosen: list[CollectiveRow]) -> tuple[list[float], list[float]]:
    spans = [b.t_end - a.t_end for a, b in zip(chosen, chosen[1:], strict=False)]
    return [r.collective_s + r.backward_wait_s for r in chosen[1:]], spans


@dataclass(frozen=True)
class Pace:
    """Whose own work sets the pace among ranks: the slowest (an index into what was given), its own
    work over the median of the others', and how much longer the others wait than it does."""

    slowest: int
    timed: bool  # own work in ms (step times, the agent), else shares of time not waiting (stacks)
    slowest_own: float
    others_own: float
    own_work_ratio: float | None
    slowest_wait: float
    others_wait: float  # the least any other rank waits

    @property
    def wait_gap(self) -> float:
        """A straggler is the rank the others wait for: it waits far less itself. Ranks that all
        wait alike (communication-bound) differ in own work only by noise."""
        return self.others_wait - self.slowest_wait

    @property
    def wait_ratio(self) -> float | None:
        """The slowest rank's wait over the least any other rank waits: well under 1 for a rank the
        others wait for, near 1 where all wait alike and own work differs only by noise. None where
        the others do not wait."""
        return self.slowest_wait / self.others_wait if self.others_wait > 0 else None

    def judged(self) -> dict[str, float | None]:
        """The values the playbook's dist.ranks expectation judges, rounded as reports carry them."""
        ratio = self.wait_ratio
        return {"own_work_ratio": None if self.own_work_ratio is None else round(self.own_work_ratio, 3),
                "others_wait_fraction": round(self.others_wait, 4), "wait_gap": round(self.wait_gap, 4),
                "slowest_wait_ratio": None if ratio is None else round(ratio, 3)}


def pace(own_ms: list[float | None], waits: list[float | None]) -> Pace | None:
    """The pace of ranks given each one's own work in ms (None without step times) and its share
    of time waiting in collectives (None: not measured, left out). By own ms where every rank with a
    wait has it, else by the share not waiting; None with fewer than 2 ranks to compare."""
    measured = [i for i, wait in enumerate(waits) if wait is not None]
    if len(measured) < 2:
        return None
    timed = all(own_ms[i] is not None for i in measured)

    def own(i: int) -> float:
        return (own_ms[i] if timed else 1.0 - (waits[i] or 0.0)) or 0.0

    slowest = max(measured, key=own)
    others = [i for i in measured if i != slowest]
    others_own = statistics.median(own(i) for i in others)
    return Pace(slowest=slowest, timed=timed, slowest_own=own(slowest), others_own=others_own,
                own_work_ratio=own(slowest) / others_own if others_own > 0 else None,
                slowest_wait=waits[slowest] or 0.0, others_wait=min(waits[i] or 0.0 for i in others))


def compare(ranks: list[RankStats]) -> dict[str, Any]:
    """The values the dist nodes judge, and each rank's verdict."""
    measured = [r for r in ranks if r.own_share is not None]
    values: dict[str, Any] = {"ranks_seen": len(ranks), "ranks_measured": len(measured)}
    found = pace([r.own_ms for r in measured], [r.collective_wait for r in measured])
    slowest: RankStats | None = None
    if found is not None:
        slowest = measured[found.slowest]
        values.update(_pace_values(found, measured, slowest))
    elif len(ranks) == 1 and measured:
        values.update(_one_rank_values(measured[0]))
    else:
        return values
    for r in measured:
        r.verdict = ("slowest own work: " + values["slowest_reading"]) if r is slowest else (
            f"waits {r.collective_wait or 0.0:.0%} of its step in collectives")
        if r.run_queue is not None and r.run_queue >= RUN_QUEUE_SAID:
            r.verdict += f"; {r.run_queue:.0%} of its time runnable, waiting for a CPU (the node's cores are busy)"
    queues = [r.run_queue for r in measured if r.run_queue is not None]
    if queues:
        values["run_queue_max"] = round(max(queues), 4)
    return values


def _pace_values(found: Pace, measured: list[RankStats], slowest: RankStats) -> dict[str, Any]:
    waits = [r.collective_wait or 0.0 for r in measured]
    values: dict[str, Any] = {}
    if found.timed:
        values["slowest_own_ms"] = round(found.slowest_own, 3)
        values["others_own_ms"] = round(found.others_own, 3)
        values["step_ms_median"] = round(statistics.median(r.step_ms or 0.0 for r in measured), 3)
    values.update({
        "slowest_rank": slowest.rank,
        **found.judged(),
        "slowest_wait_fraction": round(found.slowest_wait, 4),
        "comm_fraction_min": round(min(waits), 4),
        "comm_fraction_max": round(max(waits), 4),
        "comm_fraction_mean": round(statistics.fmean(waits), 4),
        "slowest_data_wait": None if slowest.data_wait is None else round(slowest.data_wait, 4),
        "slowest_producer_cpu": None if slowest.producer_cpu is None else round(slowest.producer_cpu, 4),
    })
    values.update(work_values(measured, slowest))
    values["slowest_reading"] = own_reading(slowest)
    return values


def _one_rank_values(rank: RankStats) -> dict[str, Any]:
    """One rank of a larger job on this node: nothing here to compare it with (no straggler among
    the ranks this walk sees), and its wait in collectives, which is for ranks elsewhere."""
    wait = round(rank.collective_wait or 0.0, 4)
    values: dict[str, Any] = {"own_work_ratio": 1.0, "others_wait_fraction": 0.0, "wait_gap": 0.0,
                              "slowest_rank": rank.rank, "comm_fraction_min": wait, "comm_fraction_max": wait,
                              "comm_fraction_mean": wait}
    if rank.step_ms is not None:
        values["step_ms_median"] = round(rank.step_ms, 3)
    return values


def compare_margins(ranks: list[RankStats], values: dict[str, Any]) -> dict[str, float]:
    """± of the values `compare` gave, from each rank's wait margin (independent windows, so
    they add in quadrature): a healthy job whose ranks' readings wobble past a threshold is
    measured again, not named a straggler (engine.judge). Empty where a rank has no margin."""
    measured = [r for r in ranks if r.own_share is not None]
    if len(measured) == 1 and measured[0].wait_margin is not None:
        return {"comm_fraction_mean": round(measured[0].wait_margin, 4)}
    slowest = next((r for r in measured if r.rank == values.get("slowest_rank")), None)
    if slowest is None or any(r.wait_margin is None for r in measured):
        return {}
    others = [r for r in measured if r is not slowest]
    least = min(others, key=lambda r: r.collective_wait or 0.0)  # others_wait_fraction's rank
    m_slow, m_other = slowest.wait_margin or 0.0, least.wait_margin or 0.0
    wait_slow, wait_other = slowest.collective_wait or 0.0, least.collective_wait or 0.0
    found = {"others_wait_fraction": m_other, "wait_gap": math.hypot(m_slow, m_other),
             "comm_fraction_mean": math.sqrt(sum((r.wait_margin or 0.0) ** 2 for r in measured)) / len(measured)}
    if wait_other > 0:  # slowest_wait_ratio = wait_slow / wait_other
        found["slowest_wait_ratio"] = math.hypot(m_slow / wait_other, wait_slow * m_other / wait_other ** 2)
    ratio = values.get("own_work_ratio")
    own_slow, own_other = 1.0 - wait_slow, 1.0 - wait_other
    if isinstance(ratio, (int, float)) and own_slow > 0 and own_other > 0:
        found["own_work_ratio"] = ratio * math.hypot(m_slow / own_slow, m_other / own_other)
    return {name: round(margin, 4) for name, margin in found.items()}


def work_values(measured: list[RankStats], slowest: RankStats) -> dict[str, Any]:
    """Whether the ranks got the same work: elements per step (batch x sequence) and steps per second."""
    values: dict[str, Any] = {}
    work = [r.batch_elements for r in measured]
    if all(w for w in work):
        values["work_ratio"] = round(max(work) / min(work), 3)  # type: ignore[type-var,operator]
        values["slowest_has_most_work"] = slowest.batch_elements == max(work)  # type: ignore[type-var]
    rates = [r.steps_per_s for r in measured]
    if all(rates):
        values["step_rate_ratio"] = round(max(rates) / min(rates), 3)  # type: ignore[type-var,operator]
    return values


def own_reading(rank: RankStats) -> str:
    """What a rank's own work is, in the words of its first departure on the slow-training walk."""
    if rank.data_wait is not None and rank.data_wait >= 0.2:
        how = ("on the CPU" if rank.producer_cpu is not None and rank.producer_cpu >= 0.5
               else "mostly waiting, off the CPU")
        return (f"input-bound: {rank.data_wait:.0%} of its step passes between steps, getting its next batch "
                f"or working after the update ({how})")
    said = (f"its compute: {1.0 - (rank.collective_wait or 0.0):.0%} of its step is its own work "
            "(forward, backward, the update, anything between steps)")
    return f"{said}, the largest share beside the model: {rank.beside}" if rank.beside else said


def table_values(row: RankRow) -> tuple[Any, Any, Any, Any, Any]:
    """A report's rank row as the rank table shows it: pid, step ms, data wait, collective wait,
    verdict (the views read rows through this, not by the report's field names)."""
    return row.get("pid"), row.get("step_ms"), row.get("data_wait"), row.get("collective_wait"), row.get("verdict")
