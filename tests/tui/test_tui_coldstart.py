"""The departure page draws the cold start as one bar when the findings have one (what the
departed node measured, with its rows; else the walk's own, after the rest of the evidence), and
nothing of it otherwise. Constructed findings on the real app, at 80x24."""

from __future__ import annotations

import re
from typing import Any

import pytest
from textual.widgets import Static
from tui_helpers import FakeScanner, wait_for

from fieldguide.analysis.coldstart import take_apart
from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.walkstate import Remeasure
from fieldguide.playbook import find_playbook
from fieldguide.report.findings import Findings


def cold_start() -> dict[str, Any]:
    """A job spawned at 100.0 that reads a checkpoint for 1.9 s; steady from step 5, 6.2 s in."""
    marks: list[dict[str, Any]] = [
        {"mark": "interpreter", "t": 100.1}, {"mark": "torch_import", "t": 101.0}, {"mark": "first_param", "t": 101.5},
        {"mark": "first_forward", "t": 104.0}, {"mark": "first_step", "t": 104.2},
        {"span": "checkpoint", "t_start": 101.6, "t_end": 103.5}]
    t = 104.2
    for n, d in enumerate([0.0, 1.0, 0.6, 0.4] + [0.1] * 40, start=1):
        t += d
        marks.append({"step": n, "t": t})
    cold = take_apart(100.0, marks, [], now=200.0)
    assert cold is not None
    return cold


def slow_start(in_evidence: bool) -> Findings:
    """Departed at start.checkpoint, on the start.phases probe's evidence (with or without its cold start)."""
    cold = cold_start()
    table = [{"phase": p["title"], "from_s": p["start_s"], "seconds": p["seconds"]} for p in cold["phases"]]
    values = {"dominant": "checkpoint", "checkpoint_fraction": 0.31}
    evidence: dict[str, Any] = {"probe": "start.phases", "values": values, "table": table, "provenance": "agent marks"}
    if in_evidence:
        evidence["cold_start"] = cold
    departure = {"node": "start.checkpoint", "cause": "start.checkpoint_load", "title": "Loading checkpoints dominates",
                 "measured": values, "expected": "dominant != checkpoint or checkpoint_fraction < 0.33",
                 "summary": "torch.load takes a third of the start.", "why": "It is read every start.",
                 "fix": ["Keep checkpoints on local storage."], "verify": "Walk again."}
    return Findings(playbook="slow-start", playbook_title="Slow start", target={}, environment={},
                    verdict="departure", first_departure=departure, conclusion=None, conclusion_text="",
                    path=[{"node": "start.checkpoint", "status": "depart", "measured": values,
                           "expected": departure["expected"], "probe": "start.phases", "seconds": 1.0, "note": ""}],
                    evidence={"start.checkpoint": evidence}, units={"checkpoint_fraction": "fraction"},
                    cold_start=None if in_evidence else cold)


def without_cold_start() -> Findings:
    findings = slow_start(in_evidence=False)
    findings.cold_start = None
    return findings


async def evidence_lines(findings: Findings) -> list[str]:
    """The departure page's evidence, every line of it (scrolled or not), at 80x24."""
    app = make_app(scanner=FakeScanner())
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(DepartureScreen(findings, find_playbook("slow-start"), Remeasure()))
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 20, "the departure page")
        lines = []
        for name in ("#dep-evidence", "#dep-detail"):
            box = app.screen.query_one(name, Static)
            lines += [box.render_line(y).text.rstrip() for y in range(box.size.height)]
        assert all(len(line) <= 80 for line in lines)
        await pilot.press("q")
    return lines


@pytest.mark.parametrize("in_evidence", [True, False], ids=["departed-node", "walk"])
async def test_the_departure_page_draws_the_cold_start(in_evidence: bool) -> None:
    lines = await evidence_lines(slow_start(in_evidence))
    text = "\n".join(lines)
    assert "Cold start: 6.2 s to steady steps, steady from step 5" in lines
    (bar,) = [line for line in lines if re.fullmatch("[█▓]{10,}", line.strip())]  # the whole line: a bar of parts has its label
    assert len(re.findall(r"█+|▓+", bar)) == 6  # a segment per phase
    assert 70 <= len(bar.strip()) <= 78  # the page's width, less its padding
    assert "To the first batch (first forward) 2.5 s" in text and "Interpreter start 0.1 s" in text
    rows = text.index("from s")  # the departed node's rows (phases)
    if in_evidence:  # what the departure measured: the bar with its rows
        assert text.index("Cold start:") < rows
    else:  # the walk timed its job's start on the side: after the rest of the evidence
        assert text.index("Cold start:") > rows


async def test_no_cold_start_no_timeline() -> None:
    text = "\n".join(await evidence_lines(without_cold_start()))
    assert "Cold start" not in text and "▓" not in text
    assert "from s" in text  # the rows are still there


async def leaf_lines(reached: bool, cold: dict[str, Any] | None) -> list[str]:
    """The walk screen's right-hand panel on a healthy leaf, every line of it, 60 columns wide."""
    from textual.app import App, ComposeResult

    from fieldguide.frontends.tui.widgets.node_panel import NodePanel

    class PanelApp(App[None]):
        def compose(self) -> ComposeResult:
            yield NodePanel()

    app = PanelApp()
    async with app.run_test(size=(60, 40)) as pilot:
        panel = app.query_one(NodePanel)
        panel.show_leaf("start.quick", "The job reaches steady steps quickly.", reached, cold)
        await pilot.pause()
        box = panel.query_one("#np-result", Static)
        return [box.render_line(y).text.rstrip() for y in range(box.size.height)]


async def test_the_healthy_leaf_the_walk_reached_shows_the_jobs_start() -> None:
    lines = await leaf_lines(True, cold_start())
    assert "The job's start" in lines
    assert "Cold start: 6.2 s to steady steps, steady from step 5" in lines
    assert not any("steady steps" in line for line in await leaf_lines(False, cold_start()))
    assert not any("steady steps" in line for line in await leaf_lines(True, None))
