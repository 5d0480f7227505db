"""Re-runs, jumps and re-measures made in the TUI go into the exported report (`reruns`), and
the departure screen reaches the walk only through the app. On the replayed recorded walk
(tests/tui/tui_replay.py), so it is quick and needs no workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tui_helpers import screen_text, wait_for
from tui_replay import replay_factory

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen
from fieldguide.report import Findings

DEMO_CMD = ["python", "loader_remote_reads.py"]


async def cursor_to(pilot, tree, node_id: str, key: str) -> None:
    for _ in range(20):
        if tree.cursor_item == ("node", node_id):
            return
        await pilot.press(key)
    raise AssertionError(f"the cursor never reached {node_id}")


async def test_reruns_jumps_and_remeasures_are_exported_and_read_back(tmp_path: Path, capsys) -> None:
    app = make_app(cmd=DEMO_CMD, playbook_id="slow-training", session_factory=replay_factory())
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
        departure = app.screen
        walk = app.showing(WalkScreen)
        assert walk is not None and walk.state.op is None

        # m on the departure screen: the app routes it to the walk; the verdict is routed back
        await pilot.press("m")
        await wait_for(pilot, lambda: "Still departs at input.data-wait" in screen_text(pilot), 30,
                       "the re-measure's verdict on the departure screen")
        assert app.screen is departure and walk.state.remeasure.rows is not None

        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is walk, 10, "the walk")
        tree = walk.playbook_tree
        await cursor_to(pilot, tree, "env.debug-flags", "up")
        await pilot.press("r")
        await wait_for(pilot, lambda: "env.debug-flags" in walk.state.reruns and walk.state.op is None, 30,
                       "the re-run")
        await cursor_to(pilot, tree, "host.blocking-io", "down")
        await pilot.press("enter")
        await wait_for(pilot, lambda: "host.blocking-io" in walk.state.reruns and walk.state.op is None, 30,
                       "the jump")

        # the departure screen, opened again, shows the last re-measure (from the walk's state)
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 10, "the departure again")
        assert "Still departs at input.data-wait" in screen_text(pilot)

        assert walk.driver is not None
        report = tmp_path / "report.json"
        walk.driver.export(report)

    data = json.loads(report.read_text())
    assert [(r["action"], r["node"]) for r in data["reruns"]] == [
        ("remeasure", "input.data-wait"), ("remeasure", "input.producer"), ("rerun", "env.debug-flags"),
        ("jump", "host.blocking-io")]
    first = data["reruns"][0]
    assert first["status"] == "depart" and first["measured"]["data_wait_fraction"] > 0.9
    assert set(first) >= {"node", "action", "status", "measured", "expected", "note", "seconds", "when"}
    # the walk on record is unchanged by what was measured off it
    assert [p["node"] for p in data["path"]] == ["target.trains", "dist.ranks", "dist.comm", "env.debug-flags", "input.worker-startup",
                                                  "input.data-wait", "input.producer", "host.blocking-io",
                                                  "host.loop-work", "host.overhead", "device.efficiency",
                                                  "host.threads"]
    assert data["verdict"] == "departure" and data["first_departure"]["cause"] == "input.waiting"

    # `fieldguide report saved.json` reads them back
    assert Findings.from_json(data).to_json() == data
    from fieldguide.frontends.cli import main

    assert main(["report", str(report), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "## Measured again in the TUI" in md and "| re-measure | input.data-wait | ✗ depart |" in md


@pytest.mark.parametrize("auto", [True, False])
async def test_a_walk_with_nothing_measured_again_exports_no_reruns(tmp_path: Path, auto: bool) -> None:
    app = make_app(cmd=DEMO_CMD, playbook_id="slow-training", session_factory=replay_factory(), auto=auto)
    async with app.run_test(size=(100, 30)) as pilot:
        # The walk's screen stays on the stack under the departure page (a replayed walk that
        # steps itself may reach it before this looks).
        await wait_for(pilot, lambda: (w := app.showing(WalkScreen)) is not None and w.session is not None, 30,
                       "the walk")
        walk = app.showing(WalkScreen)
        assert walk is not None and walk.driver is not None
        if auto:
            await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
        report = tmp_path / "report.json"
        walk.driver.export(report)
    assert "reruns" not in json.loads(report.read_text())


async def test_the_demo_spec_carries_its_playbook() -> None:
    from fieldguide.frontends.tui.demo import demo_spec

    spec = demo_spec()
    assert spec.demo and spec.playbook == "slow-training"  # the playbook the demo workload declares
    assert demo_spec("other").playbook == "other"


async def test_quitting_says_the_verdict_and_where_the_report_went(tmp_path: Path) -> None:
    app = make_app(cmd=DEMO_CMD, playbook_id="slow-training", session_factory=replay_factory(), auto=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
        assert app.farewell() == ("fieldguide slow-training: departure: input.waiting; report not exported "
                                  "(e on the departure page, or `fieldguide diagnose --report PATH`)")
        app.last_export = tmp_path / "r.html"
        assert app.farewell().endswith(f"; report: {tmp_path / 'r.html'}")
