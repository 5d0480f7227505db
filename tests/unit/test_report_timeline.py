"""The cold start drawn with cells (report/charts.py lays it out, report/summary.py draws it): the
segments add up to the bar, in proportion, a tiny phase still seen; the headless summary and the
Markdown report show it for a constructed walk whose node timed the start."""

from __future__ import annotations

import re
from io import StringIO
from typing import Any

import pytest
from rich.console import Console

from fieldguide.analysis.coldstart import SHARE_TITLES, take_apart
from fieldguide.report import Findings, to_markdown
from fieldguide.report.drawing import COLOURS
from fieldguide.report.summary import summary_panel
from fieldguide.report.terminal import TimelineBar as Timeline
from fieldguide.report.timeline import FILLS, cell_widths, cold_start_of, timeline_segments


def marks() -> list[dict[str, Any]]:
    """A job spawned at 100.0 that reads a checkpoint for 1.9 s; steady from step 5, at 106.2."""
    found: list[dict[str, Any]] = [
        {"mark": "interpreter", "t": 100.1}, {"mark": "torch_import", "t": 101.0}, {"mark": "first_param", "t": 101.5},
        {"mark": "first_forward", "t": 104.0}, {"mark": "first_step", "t": 104.2},
        {"span": "checkpoint", "t_start": 101.6, "t_end": 103.5}]
    t = 104.2
    for n, d in enumerate([0.0, 1.0, 0.6, 0.4] + [0.1] * 40, start=1):
        t += d
        found.append({"step": n, "t": t})
    return found


COLD = take_apart(100.0, marks(), [], now=200.0)
assert COLD is not None
DEPARTURE = {"node": "start.checkpoint", "cause": "start.checkpoint_load", "title": "Loading checkpoints dominates",
             "measured": {"checkpoint_fraction": 0.31}, "expected": "checkpoint_fraction < 0.33",
             "summary": "torch.load takes a third of the start.", "why": "w", "fix": ["f"], "verify": "v"}


def walk(evidence_cold: bool = True, walk_cold: bool = True, departs: bool = True) -> Findings:
    """A slow-start walk: its node measured the start (evidence with cold_start and its table) or not."""
    assert COLD is not None
    table = [{"phase": p["title"], "from_s": p["start_s"], "seconds": p["seconds"]} for p in COLD["phases"]]
    evidence: dict[str, Any] = {"probe": "start.phases", "values": {"checkpoint_fraction": 0.31}, "table": table}
    if evidence_cold:
        evidence["cold_start"] = COLD
    step = {"node": "start.checkpoint", "status": "depart" if departs else "pass",
            "measured": {"checkpoint_fraction": 0.31}, "expected": "checkpoint_fraction < 0.33",
            "probe": "start.phases", "seconds": 1.0, "note": ""}
    return Findings(playbook="slow-start", playbook_title="Slow start", target={}, environment={},
                    verdict="departure" if departs else "clean", first_departure=DEPARTURE if departs else None,
                    conclusion=None if departs else "start.quick", conclusion_text="" if departs else "quick",
                    path=[step], evidence={"start.checkpoint": evidence}, cold_start=COLD if walk_cold else None)


# -- the layout ------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [1, 7, 10, 33, 76, 120])
@pytest.mark.parametrize("seconds", [[0.12, 0.9, 0.5, 2.5, 0.2, 2.0], [1.0], [3.0, 3.0, 3.0], [0.001, 50.0, 0.0, 9.0],
                                     [1e-6] * 4 + [1e6], [2.0, 0.0, 0.0]])
def test_the_cells_add_up_to_the_bar(seconds: list[float], width: int) -> None:
    cells = cell_widths(seconds, width)
    live = sum(s > 0 for s in seconds)
    assert len(cells) == len(seconds) and sum(cells) == max(width, live)
    assert all((c >= 1) == (s > 0) for c, s in zip(cells, seconds, strict=True))  # every phase seen, none made up


def test_the_cells_are_in_proportion_to_the_seconds() -> None:
    assert cell_widths([1.0, 2.0, 3.0, 4.0], 20) == [2, 4, 6, 8]
    assert cell_widths([1.0, 1.0, 1.0], 10) == [4, 3, 3]  # the remainder to the first of equals
    seconds = [0.12, 0.9, 0.5, 2.5, 0.2, 2.0]
    cells = cell_widths(seconds, 76)
    for c, s in zip(cells, seconds, strict=True):
        assert abs(c - s / sum(seconds) * 76) < 1  # rounded, never more than a cell off
    assert cells.index(max(cells)) == seconds.index(max(seconds))


def test_a_tiny_phase_gets_one_cell_taken_from_the_widest() -> None:
    assert cell_widths([0.001, 100.0, 0.0], 10) == [1, 9, 0]
    assert cell_widths([1e-6, 1e-6, 5.0, 1.0], 8) == [1, 1, 5, 1]
    assert cell_widths([1.0] * 5, 3) == [1] * 5  # more phases than cells: one each, the bar widens
    assert cell_widths([0.0, 0.0], 10) == [0, 0] and cell_widths([], 10) == []
    assert cell_widths([float("nan"), -1.0, 2.0], 4) == [0, 0, 4]


def test_segments_follow_the_phases_coloured_as_the_svg_timeline() -> None:
    assert COLD is not None
    segments = timeline_segments(COLD["phases"], 60)
    assert [s.phase for s in segments] == [p["phase"] for p in COLD["phases"]]
    assert sum(s.cells for s in segments) == 60
    assert [s.colour for s in segments] == list(COLOURS[:len(segments)]) and len(set(COLOURS)) == len(COLOURS)
    assert all(a.fill != b.fill for a, b in zip(segments, segments[1:], strict=False)) and set(FILLS) == {"█", "▓"}
    assert segments[0].words == "Interpreter start 0.1 s"
    assert timeline_segments([{"title": "x", "seconds": None}, "junk"], 10) == []


def test_the_cold_start_drawn_is_what_a_node_measured_else_the_walks() -> None:
    assert cold_start_of(walk()) == (COLD, "start.checkpoint")
    assert cold_start_of(walk(evidence_cold=False)) == (COLD, None)
    assert cold_start_of(walk(evidence_cold=False, walk_cold=False)) == (None, None)


# -- the headless summary ------------------------------------------------------------------------------

def printed(renderable: object, width: int = 80) -> str:
    console = Console(width=width, file=StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def bar_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if re.search("[█▓]{10}", line)]
    return line


def test_the_summary_draws_the_bar_with_the_departures_rows() -> None:
    text = printed(summary_panel(walk()))
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "Cold start: 6.2 s to steady steps, steady from step 5" in text
    bar = bar_line(text).strip("│ ")
    assert len(bar) == 76  # the panel's width, less its border and padding
    runs = re.findall(r"█+|▓+", bar)
    assert len(runs) == len(COLD["phases"])  # type: ignore[index]
    for entry in ("Interpreter start 0.1 s", "To the first batch (first forward) 2.5 s", "Warm-up, to steady steps 2 s"):
        assert entry in text
    assert text.index("Cold start:") < text.index("from s")  # the bar, then the phases' rows
    assert "Cold start:" in printed(summary_panel(walk(departs=False)))  # a quick start: the timeline still
    assert "Cold start" not in printed(summary_panel(walk(evidence_cold=False)))  # no node timed the start


def test_the_bar_fits_a_narrow_terminal_and_says_when_not_steady() -> None:
    cold = take_apart(100.0, [{"mark": "interpreter", "t": 100.1}, {"mark": "torch_import", "t": 101.0}], [],
                      now=160.0)
    assert cold is not None
    text = printed(Timeline(cold), 40)
    assert text.splitlines()[0] == "Cold start: 60 s so far, not steady yet"
    assert len(bar_line(text)) == 40 and all(len(line) <= 40 for line in text.splitlines())
    assert "Still starting (not steady yet) 59 s" in text


# -- the Markdown report -----------------------------------------------------------------------------

def test_markdown_has_a_cold_start_section_with_phases_and_shares() -> None:
    text = to_markdown(walk())
    section = text.split("## Cold start\n", 1)[1].split("\n## ", 1)[0]
    assert "6.2 s to steady steps, steady from step 5." in section
    assert "| phase | from s | seconds | share |" in section
    assert "| To the first batch (first forward) | 1.5 | 2.5 | 40% |" in section
    shares = re.findall(r"^\| (.+?) \| ([\d.]+) \| \d+% \|$", section.split("| where the time went |", 1)[1], re.M)
    assert [title for title, _ in shares][:2] == [SHARE_TITLES["warmup"], SHARE_TITLES["checkpoint"]]
    assert len(shares) == len(SHARE_TITLES)
    assert "| loading checkpoints (torch.load) | 1.9 | 31% |" in section
    assert "## Cold start" in to_markdown(walk(evidence_cold=False))  # the walk's own, every launched walk
    assert "## Cold start" not in to_markdown(walk(evidence_cold=False, walk_cold=False))
