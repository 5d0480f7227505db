"""The cold start as cells of a terminal (the TUI's departure page, the headless summary): the
phases on one bar, in proportion, coloured as the SVG timeline (charts.py) colours them (drawing.py's palette)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fieldguide.probes.evidence import COLD_START, ColdStart
from fieldguide.report.drawing import COLOURS, fmt, number
from fieldguide.report.section_types import Cell, Table
from fieldguide.report.section_types import Timeline as TimelineSection

if TYPE_CHECKING:
    from fieldguide.report.findings import Findings

FILLS = ("█", "▓")  # alternate, so that neighbouring segments differ without colour too


@dataclass(frozen=True)
class Segment:
    """A phase of the cold start on a bar of cells: as many cells as its share of the seconds, the
    colour the SVG timeline gives it, and the fill that tells it from its neighbours without colour."""

    phase: str
    title: str
    seconds: float
    cells: int
    colour: str
    fill: str

    @property
    def words(self) -> str:
        """`Interpreter start 0.12 s`: the legend's entry."""
        return f"{self.title} {fmt(self.seconds, 's')}"


def timed_phases(phases: object) -> list[tuple[str, str, float, float]]:
    """(phase, title, start_s, seconds) per phase with a number of seconds (not below zero)."""
    found = []
    for p in phases if isinstance(phases, list) else []:
        seconds = number(p.get("seconds")) if isinstance(p, dict) else None
        if isinstance(p, dict) and seconds is not None and seconds >= 0:
            found.append((str(p.get("phase") or ""), str(p.get("title") or p.get("phase") or "?"),
                          number(p.get("start_s")) or 0.0, seconds))
    return found


def share_of(seconds: float, total: object) -> str:
    return f"{seconds / total:.0%}" if isinstance(total, (int, float)) and total > 0 else ""


def phases_table(timeline: TimelineSection) -> Table:
    """A timeline as a document draws it: a row per phase, from when, how long, what share."""
    total = timeline.cold.get("total_s")
    return Table(("phase", "from s", "seconds", "share"),
                 tuple(tuple(Cell(text) for text in (title, f"{start:.3g}", f"{seconds:.3g}", share_of(seconds, total)))
                       for _, title, start, seconds in timed_phases(timeline.cold.get("phases"))))


def cell_widths(amounts: list[float], width: int) -> list[int]:
    """Cells per amount on a bar of `width` cells: in proportion, rounded (largest remainder) so
    that they add up to `width`, with at least one cell for an amount above zero (taken from the
    widest) and none for zero. With more amounts above zero than cells, one cell each (the bar is
    then wider than `width`)."""
    values = [max(number(a) or 0.0, 0.0) for a in amounts]
    total = sum(values)
    if total <= 0 or width <= 0:
        return [0] * len(values)
    width = max(width, sum(v > 0 for v in values))
    ideal = [v / total * width for v in values]
    cells = [max(int(x), 1) if v > 0 else 0 for x, v in zip(ideal, values, strict=True)]
    live = [i for i, v in enumerate(values) if v > 0]
    while sum(cells) < width:  # the largest remainders get a cell more
        cells[max(live, key=lambda i: ideal[i] - cells[i])] += 1
    while sum(cells) > width:  # the minimum cells were too many: the most over its share gives one back
        cells[max((i for i in live if cells[i] > 1), key=lambda i: cells[i] - ideal[i])] -= 1
    return cells


def timeline_segments(phases: object, width: int) -> list[Segment]:
    """The cold start's phases on one bar of `width` cells (`cell_widths`), in their order, coloured
    as the SVG timeline colours them."""
    found = timed_phases(phases)
    widths = cell_widths([seconds for *_, seconds in found], width)
    return [Segment(phase, title, seconds, cells, COLOURS[i % len(COLOURS)], FILLS[i % len(FILLS)])
            for i, ((phase, title, _, seconds), cells) in enumerate(zip(found, widths, strict=True))]


def timeline_title(cold: ColdStart) -> str:
    """`Cold start: 6.2 s to steady steps, steady from step 5` (or the time so far, not steady yet)."""
    total = number(cold.get("total_s"))
    if cold.get("steady") is False:
        return "Cold start" + (f": {fmt(total, 's')} so far, not steady yet" if total is not None else "")
    steady = f", steady from step {cold['steady_step']}" if cold.get("steady_step") is not None else ""
    return "Cold start" + (f": {fmt(total, 's')} to steady steps" if total is not None else "") + steady


def cold_start_of(findings: Findings, nodes: list[str] | None = None) -> tuple[ColdStart | None, str | None]:
    """The cold start to draw, and the node whose evidence held it: the first of `nodes` (all, by
    default) whose probe timed the start (what a departure on it measured), else the walk's own
    (`findings.cold_start`, node None); (None, None) where there is none."""
    for node in nodes if nodes is not None else list(findings.evidence):
        cold = COLD_START.of(findings.evidence.get(node))
        if isinstance(cold, dict) and timed_phases(cold.get("phases")):
            return cold, node
    cold = findings.cold_start
    return (cold, None) if isinstance(cold, dict) and timed_phases(cold.get("phases")) else (None, None)
