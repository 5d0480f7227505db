"""The report's sections for the evidence kinds a report shows (probes/evidence.py, `shown`), one
renderer per kind, registered here: the findings' sections (report/sections.py) take them from this
registry by where they go, and never read an evidence key themselves. A kind a report should show
is its declaration, the probe that leaves it, and one `@renders(...)` function below."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fieldguide.analysis.coldstart import SHARE_TITLES
from fieldguide.measurement import format_value
from fieldguide.probes import evidence as ev
from fieldguide.report.findings import Findings
from fieldguide.report.section_types import (
    Cell,
    Heading,
    Paragraph,
    Preformatted,
    Section,
    Span,
    Table,
    Timeline,
    cells,
    code,
)
from fieldguide.report.timeline import cold_start_of, share_of, timeline_title

# Where a kind's sections go in a report: beside the departure (what the node found), after the
# walk's notes (the job's start), or in the appendix after the path (the raw stacks).
FINDING, START, APPENDIX = "finding", "start", "appendix"
PLACES = (FINDING, START, APPENDIX)


@dataclass(frozen=True)
class EvidenceRenderer:
    kinds: tuple[ev.EvidenceKind[Any], ...]
    place: str
    build: Callable[[Findings], list[Section]]


RENDERERS: list[EvidenceRenderer] = []


def renders(*kinds: ev.EvidenceKind[Any], place: str) -> Callable[[Callable[[Findings], list[Section]]],
                                                                   Callable[[Findings], list[Section]]]:
    """Register `build(findings) -> sections` as the one renderer of `kinds` in a report."""
    if place not in PLACES:
        raise ValueError(f"unknown place {place!r}")

    def register(build: Callable[[Findings], list[Section]]) -> Callable[[Findings], list[Section]]:
        RENDERERS.append(EvidenceRenderer(kinds, place, build))
        return build
    return register


def evidence_sections(findings: Findings, place: str) -> list[Section]:
    """Every registered kind's sections that go at `place`, in registration order."""
    return [section for r in RENDERERS if r.place == place for section in r.build(findings)]


def _percent(share: object) -> str:
    return f"{share:.0%}" if isinstance(share, (int, float)) and not isinstance(share, bool) else "—"


def _stack_share(stack: ev.StackShare) -> str:
    """A main-thread stack's share of the samples; a worker stack's count of them."""
    return _percent(stack["share"]) if "share" in stack else f"{stack.get('samples', 0)} samples"


@renders(ev.TABLE, place=FINDING)
def found(f: Findings) -> list[Section]:
    """The departed node's table (graph breaks, recompiles, ranks), if its probe left one."""
    rows = f.found_rows()
    if not rows:
        return []
    dep = f.first_departure
    columns = tuple(dict.fromkeys(k for r in rows for k in r))
    return [Heading(3, f"What {dep['node'] if dep else 'the node'} found"),
            Table(columns, tuple(tuple(Cell(format_value(r.get(c))) for c in columns) for r in rows))]


BAR_WIDTH = 20  # characters of a budget line's bar at a share of 1
NON_COMPUTE_LISTED = 0.10  # a share of the step outside the model's own work listed at this size or more


def bar(share: float, width: int = BAR_WIDTH) -> str:
    """A share as a bar of block characters (eighths), for a table cell in any format."""
    eighths = max(0, min(round(share * width * 8), width * 8))
    full, part = divmod(eighths, 8)
    return "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")


@renders(ev.BUDGET, place=FINDING)
def step_budget(f: Findings) -> list[Section]:
    """Every share of the training thread's step, named: part, share ± margin, a bar, where. The
    walk's budget (timed shares in place of sampled ones, launched), else a node's sampled one."""
    rows = f.budget or f.first_of(ev.BUDGET) or []
    if not rows:
        return []
    table = []
    for row in rows:
        share, margin = float(row.get("share") or 0.0), float(row.get("margin") or 0.0)
        how = " (timed)" if row.get("timed") else ""
        table.append((Cell(str(row.get("label") or row.get("part"))), Cell(f"{share:.0%} ± {margin:.0%}{how}"),
                      Cell(bar(share)), Cell(str(row.get("at") or ""), code=bool(row.get("at"))),
                      Cell("" if row.get("avoidable") is False else "yes")))
    listed = [r for r in rows if r.get("avoidable") and float(r.get("share") or 0.0) >= NON_COMPUTE_LISTED]
    said: list[Section] = []
    if listed:
        said = [Paragraph((Span("Outside the model's own work, 10% or more of the step: " + "; ".join(
            f"{r.get('label')} {float(r['share']):.0%}" + (f" at {r['at']}" if r.get("at") else "")
            for r in listed) + "."),))]
    return [Heading(3, "Step budget: where the training thread's time goes"),
            Table(("part", "share", "", "where", "avoidable"), tuple(table)), *said]


@renders(ev.TORCH_TRACE, place=FINDING)
def torch_trace(f: Findings) -> list[Section]:
    trace = f.first_of(ev.TORCH_TRACE)
    if not trace:
        return []
    # tlparse reads one log file, not the folder: the command is each log's artifact's own.
    commands = [a["command"] for a in f.artifacts if a.get("kind") == "torch_trace" and a.get("command")]
    if not commands:
        return [Paragraph((Span("Compile trace (TORCH_TRACE) in "), code(trace),
                           Span(": no log file was written there (the job compiled nothing while traced).")))]
    said = [Paragraph((Span("Compile trace (TORCH_TRACE) in "), code(trace), Span(": read it with "),
                       code("pip install tlparse"), Span(" and then:")))]
    return [*said, Preformatted(tuple(commands))]


@renders(ev.COLD_START, place=START)
def cold_start(f: Findings) -> list[Section]:
    """The time to steady steps, the timeline's phases and where the time went (the disjoint
    shares, largest first); what a node of the walk measured, else the walk's own."""
    cold, node = cold_start_of(f, [str(step["node"]) for step in f.path])
    if cold is None:
        return []
    total = cold.get("total_s")
    sections: list[Section] = [
        Heading(2, "Cold start"), Paragraph((Span(timeline_title(cold).removeprefix("Cold start: ") + "."),)),
        Timeline(cold, node)]
    shares = cold.get("shares")
    spent = sorted(((str(n), float(v)) for n, v in (shares.items() if isinstance(shares, dict) else [])
                    if isinstance(v, (int, float)) and not isinstance(v, bool)), key=lambda item: -item[1])
    if spent:
        sections.append(Table(("where the time went", "seconds", "share"),
                              tuple(cells(SHARE_TITLES.get(name, name), f"{seconds:.3g}", share_of(seconds, total))
                                    for name, seconds in spent)))
    return sections


@renders(ev.RANKS, ev.JOB, place=APPENDIX)
def ranks(f: Findings) -> list[Section]:
    """Each rank's step, own work and waits where the walk measured ranks (one rank of a larger
    job too), and which job they belong to."""
    rows = f.ranks or f.first_of(ev.RANKS) or []
    job = f.job or f.first_of(ev.JOB)
    if not rows:
        return []
    columns = ("rank", "node_rank", "host", "step_ms", "own_ms", "data_wait", "collective_wait", "verdict")
    said = []
    if job:
        remote = job["world_size"] - len(rows)
        said = [Paragraph((Span(f"Job {job.get('id') or '(no run id)'}, rendezvous {job.get('master') or 'n/a'}, "
                                f"{job['world_size']} ranks: {len(rows)} here"
                                + (f", {remote} on other nodes (merge every node's report: "
                                   "fieldguide report merge)" if remote > 0 else "") + "."),))]
    return [Heading(2, "Ranks"), *said,
            Table(columns, tuple(tuple(Cell(_percent(r.get(c)) if c.endswith("_wait") else format_value(r.get(c)))
                                       for c in columns) for r in rows))]


@renders(ev.TOP_OPS, place=FINDING)
def top_ops(f: Findings) -> list[Section]:
    """The operators the op profile timed, by total time: what an overhead verdict rests on (many
    calls of microseconds each, or a few long ones), with each one's share of the profiled steps."""
    found = f.of_kind(ev.TOP_OPS)
    if not found:
        return []
    node, ops = found[0]
    values = (f.evidence.get(node) or {}).get("values") or {}
    steps, step_ms = values.get("profiled_steps"), values.get("profiled_step_ms")
    wall_us = steps * step_ms * 1e3 if isinstance(steps, (int, float)) and isinstance(step_ms, (int, float)) else 0.0
    rows = []
    for op in ops:
        total_us, calls = float(op.get("total_us") or 0.0), int(op.get("count") or 0)
        rows.append((Cell(str(op.get("op", "")), code=True), Cell(f"{calls:,}"), Cell(f"{total_us / 1e3:.1f} ms"),
                     Cell(f"{total_us / calls:.1f} µs" if calls else "—"),
                     Cell(_percent(total_us / wall_us) if wall_us else "—")))
    over = f" over {steps} profiled steps of {step_ms} ms" if wall_us else ""
    return [Heading(3, f"Top operators{over} (torch.profiler, {node})"),
            Table(("op", "calls", "total", "per call", "share of the steps"), tuple(rows))]


@renders(ev.RATE, place=FINDING)
def achieved_rate(f: Findings) -> list[Section]:
    """How fast the step is against what this machine can do: GFLOP a step by dtype, the rate
    achieved, its share of the calibrated peak (or why there is none), and the threads it ran."""
    rate = f.first_of(ev.RATE)
    if not rate or not rate.get("gflop_per_step"):
        return []
    said = f"This step does {rate['gflop_per_step']:g} GFLOP ({str(rate.get('dtype_mix')).split(' of ')[0]})"
    achieved, peak = rate.get("achieved_gflops"), rate.get("peak_gflops")
    if isinstance(achieved, (int, float)):
        said += f" at {achieved:g} GFLOP/s"
        if isinstance(peak, (int, float)) and peak > 0:
            whose = "a datasheet's peak for this GPU" if rate.get("peak_measured") is False else "this machine's peak"
            said += f": {achieved / peak:.0%} of {whose} ({peak:g} GFLOP/s; {rate.get('peak_from')})"
        else:
            said += f"; no peak to compare with: {rate.get('peak_from')}"
    threads = rate.get("intra_op_threads")
    if threads is not None:
        said += f". It runs {threads} intra-op thread{'s' if threads != 1 else ''}"
        if rate.get("usable_cores") is not None:
            said += f" of {rate['usable_cores']:g} usable cores ({rate.get('usable_why')})"
    counted = rate.get("counted_step_ms")
    if isinstance(counted, (int, float)):
        said += f". The FLOPs were counted over one step, which took {counted:g} ms under the count"
    return [Heading(3, "How fast the step is against this machine"), Paragraph((Span(said + "."),))]


@renders(ev.TOP_STACKS, ev.TOP_WORKER_STACKS, place=APPENDIX)
def top_stacks(f: Findings) -> list[Section]:
    whose, stacks = f.top_stacks()
    if not stacks:
        return []
    return [Heading(2, f"Top stacks ({whose})"),
            Table(("share", "where", "stack (innermost first)"),
                  tuple((Cell(_stack_share(s)), Cell(str(s.get("category", ""))),
                         Cell(str(s.get("stack", "")), code=True)) for s in stacks))]
