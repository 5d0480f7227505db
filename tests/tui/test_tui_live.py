"""The real app on the real bundled CPU workload: a whole walk, export, re-measure, quitting.

Each test launches (or attaches to) the demo, loader_remote_reads.py, and takes 20-60 s.
Nothing is faked here: the probes, the agent, py-spy and the target are the real ones.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from textual.widgets import DataTable, Input
from tui_helpers import screen_text, wait_for

from fieldguide import workloads
from fieldguide.frontends.tui.app import FieldguideApp, make_app
from fieldguide.frontends.tui.dialogs.export import ConfirmOverwrite, ExportDialog
from fieldguide.frontends.tui.procscan import ProcessScanner
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.help import HelpScreen
from fieldguide.frontends.tui.screens.picker import PlaybookPicker, TargetPicker
from fieldguide.frontends.tui.screens.walk import WalkScreen
from fieldguide.walk.session import demo_command

pytestmark = pytest.mark.integration

WALK_TIMEOUT = 90.0  # a slow-training walk of the demo takes about 20 s on 2 idle cores


@pytest.fixture(autouse=True)
def short_workloads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIELDGUIDE_WORKLOAD_SECONDS", "100")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def notified(app: FieldguideApp, text: str) -> bool:
    return any(text in n.message or text in n.title for n in app._notifications)


async def export_to(pilot, app: FieldguideApp, path: str | None, *, then: str = "enter") -> None:
    await pilot.press("e")
    await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), 20, "the export dialog")
    if path is not None:
        await pilot.press("ctrl+u", *path)
    await pilot.press(then)


async def test_demo_walks_itself_to_the_departure_exports_and_remeasures(tmp_path: Path, monkeypatch, apps) -> None:
    monkeypatch.chdir(tmp_path)
    torch_before = "torch" in sys.modules
    app = make_app(demo=True)
    apps.append(app)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, WalkScreen), 20, "the walk screen")
        walk_screen = app.screen
        assert isinstance(walk_screen, WalkScreen)
        tree = walk_screen.playbook_tree

        # live readings of the loop probe: per-step time and data wait, as sparklines
        def loop_readings() -> bool:
            reading = walk_screen.panel.live.readings.get("loop.steps", {})
            series = reading.get("series") or {}
            return walk_screen.state.measuring == "input.worker-startup" and len(series.get("step_ms") or []) > 5

        await wait_for(pilot, loop_readings, 60, "live loop.steps readings")
        text = screen_text(pilot)
        assert "▸ input.worker-startup" in text and "probe loop.steps" in text
        assert "step ms" in text and "wait ms" in text and "progress" in text
        assert tree.states["env.debug-flags"] == "pass"

        # keys are answered while the probe runs: help opens before the measurement is over
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 5, "help while measuring")
        assert walk_screen.state.measuring == "input.worker-startup"
        await pilot.press("escape")

        # the walk goes on by itself over the step's shares, and shows the largest departure
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), WALK_TIMEOUT, "the departure")
        assert tree.states == {"target.trains": "pass", "dist.ranks": "pass", "dist.uneven": "waiting", "dist.comm": "pass", "dist.remote": "waiting", "env.debug-flags": "pass", "input.worker-startup": "pass",
                               "input.data-wait": "depart", "input.producer": "pass", "host.blocking-io": "pass",
                               "host.loop-work": "pass", "host.overhead": "pass", "device.efficiency": "pass",
                               "host.threads": "pass"}
        assert tree.reached == {"input.waiting"}
        text = screen_text(pilot)
        assert "input.waiting" in text and "departed at input.data-wait" in text
        assert "data_wait_fraction" in text and "Evidence" in text
        from rich.console import Console

        page = Console(width=100, record=True, file=io.StringIO())
        page.print(app.screen.query_one("#dep-guide").content)
        guide = page.export_text()
        assert "Fix:" in guide and "num_workers" in guide and "Verify:" in guide

        # export: the default path, then never overwrite without asking
        await export_to(pilot, app, None)
        report = tmp_path / "fieldguide-report.json"
        await wait_for(pilot, report.exists, 20, "the report")
        data = json.loads(report.read_text())
        assert data["verdict"] == "departure" and data["first_departure"]["cause"] == "input.waiting"
        assert [p["node"] for p in data["path"]] == ["target.trains", "dist.ranks", "dist.comm", "env.debug-flags", "input.worker-startup",
                                                      "input.data-wait", "input.producer", "host.blocking-io",
                                                      "host.loop-work", "host.overhead", "device.efficiency",
                                                      "host.threads"]
        await wait_for(pilot, lambda: notified(app, str(report)), 10, "a notification naming the file")
        # The viewers' files travel with the report: beside it, and named in the toast.
        folder = str(report.resolve().with_name("fieldguide-report-artifacts"))
        assert data["artifacts"] and all(a["path"].startswith(folder) for a in data["artifacts"]), data["artifacts"]
        assert notified(app, "fieldguide-report-artifacts")
        before = report.stat().st_mtime_ns
        await export_to(pilot, app, None)  # the default is now the file just written
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmOverwrite), 20, "the overwrite question")
        assert "fieldguide-report.json already exists" in screen_text(pilot)
        await pilot.press("n")
        await wait_for(pilot, lambda: notified(app, "nothing written"), 10, "kept the file")
        assert report.stat().st_mtime_ns == before
        await export_to(pilot, app, None)
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmOverwrite), 20, "the overwrite question")
        await pilot.press("y")
        await wait_for(pilot, lambda: report.stat().st_mtime_ns != before, 20, "the file rewritten")
        await export_to(pilot, app, "findings.md")
        markdown = tmp_path / "findings.md"
        await wait_for(pilot, markdown.exists, 20, "the Markdown report")
        assert "input.waiting" in markdown.read_text()
        await export_to(pilot, app, "findings.txt")
        assert "Use a .json, .md or .html suffix" in screen_text(pilot)
        await pilot.press("escape")

        # re-measure: the launched job is started afresh (a fix would be loaded) and measured again
        first_pid = app.launched_pids()[0]
        await pilot.press("m")
        remeasure = app.screen.query_one("#dep-remeasure")
        await wait_for(pilot, lambda: "Still departs at input.data-wait" in screen_text(pilot), WALK_TIMEOUT,
                       "the re-measure verdict")
        assert remeasure.display
        assert gone(first_pid)
        second_pid = app.launched_pids()[0]
        assert second_pid != first_pid

        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
    assert gone(second_pid)
    assert app.exit_code() == 1  # a departure, as `fieldguide diagnose` would say
    if not torch_before:
        assert "torch" not in sys.modules  # the TUI process measured it all without importing torch


async def test_manual_steps_jumps_reruns_then_quit_mid_probe_ends_the_job(apps) -> None:
    app = make_app(cmd=demo_command(), playbook_id="slow-training", auto=False)
    apps.append(app)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: (w := app.showing(WalkScreen)) is not None and w.session is not None, 60,
                       "the job to reach its first steps")
        walk_screen = app.screen
        tree = walk_screen.playbook_tree
        assert set(tree.states.values()) == {"waiting"}
        assert "paused" in walk_screen.sub_title

        await pilot.press("n")  # one manual step: is it training at all?
        await wait_for(pilot, lambda: tree.states["target.trains"] == "pass" and walk_screen.state.op is None, 30,
                       "target.trains measured")
        assert walk_screen.session.walk.current == "dist.ranks"
        for node in ("dist.ranks", "dist.comm"):  # one process: the rank nodes pass at once
            await pilot.press("n")
            await wait_for(pilot, lambda node=node: tree.states[node] == "pass" and walk_screen.state.op is None, 30,
                           f"{node} measured")
        await pilot.press("n")  # and the next
        await wait_for(pilot, lambda: tree.states["env.debug-flags"] == "pass" and walk_screen.state.op is None, 30,
                       "env.debug-flags measured")
        assert walk_screen.session.walk.current == "input.worker-startup"
        assert "anomaly_detection" in screen_text(pilot)

        for _ in range(12):  # the cursor, by keyboard, to input.producer
            if tree.cursor_item == ("node", "input.producer"):
                break
            await pilot.press("down")
        assert tree.cursor_item == ("node", "input.producer")
        await pilot.press("enter")  # jump there and measure it (off the walk's record)
        await wait_for(pilot, lambda: walk_screen.state.measuring == "input.producer", 20, "the jump to start")
        await wait_for(pilot, lambda: tree.states["input.producer"] in ("pass", "depart") and walk_screen.state.op is None,
                       60, "input.producer measured")
        assert [r.node for r in walk_screen.session.walk.path] == ["target.trains", "dist.ranks", "dist.comm", "env.debug-flags"]
        assert "producer_cpu_fraction" in screen_text(pilot)

        for _ in range(12):
            if tree.cursor_item == ("node", "env.debug-flags"):
                break
            await pilot.press("up")
        await pilot.press("r")  # re-run, fresh
        await wait_for(pilot, lambda: "env.debug-flags" in walk_screen.state.reruns and walk_screen.state.op is None, 30,
                       "the re-run")
        assert "re-run" in screen_text(pilot)

        await pilot.press("a")  # walk on by itself
        # input.worker-startup, input.data-wait and input.producer reuse the loop.steps window the jump
        # measured: the walk reaches the demo's departure, then walks the step's other shares.
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 60, "the walk to go on")
        assert [r.node for r in walk_screen.session.walk.path] == ["target.trains", "dist.ranks", "dist.comm", "env.debug-flags",
                                                                 "input.worker-startup", "input.data-wait",
                                                                 "input.producer", "host.blocking-io",
                                                                 "host.loop-work", "host.overhead", "device.efficiency",
                                                      "host.threads"]
        first_pid = app.launched_pids()[0]
        await pilot.press("m")  # re-measure: a fresh job, walked again; quit while it is being measured
        await wait_for(pilot, lambda: app.launched_pids() and app.launched_pids()[0] != first_pid, 60,
                       "the fresh job")
        await pilot.pause(1.0)
        pid = app.launched_pids()[0]
        started = time.monotonic()
        await pilot.press("q")  # mid-probe
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
    assert gone(pid), "quitting must end the launched job"
    assert time.monotonic() - started < 20
    assert app.exit_code() == 1  # the walk's departure stands; only the re-measure was cut short


@pytest.fixture
def torch_job():
    """The demo run plainly (no agent), as a user's job would be, once it has imported torch."""
    job = subprocess.Popen([sys.executable, str(workloads.path(workloads.DEMO))],
                           env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="90"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scanner = ProcessScanner()
    deadline = time.monotonic() + 60
    try:
        while job.pid not in {r.pid for r in scanner()}:  # listed once it has imported torch
            assert time.monotonic() < deadline and job.poll() is None, "the demo never showed up as a torch process"
            time.sleep(0.5)
        yield job, scanner
    finally:
        job.kill()
        job.wait()


async def test_picker_finds_a_real_torch_job_and_quitting_leaves_an_attached_one_running(torch_job, apps) -> None:
    job, scanner = torch_job
    row = next(r for r in scanner() if r.pid == job.pid)
    assert row.torch and row.rss_mib > 50 and "loader_remote_reads.py" in row.cmdline

    app = make_app(scanner=scanner)
    apps.append(app)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        def listed() -> bool:
            return isinstance(app.screen, TargetPicker) and job.pid in app.screen.rows

        await wait_for(pilot, listed, 30, "the job in the picker")
        await pilot.press("tab")
        table = app.screen.query_one("#procs", DataTable)
        for _ in range(20):
            if table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value == str(job.pid):
                break
            await pilot.press("down")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PlaybookPicker), 20, "the playbook picker")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, WalkScreen), 20, "the walk")
        walk_screen = app.screen
        await wait_for(pilot, lambda: walk_screen.state.measuring is not None, 60, "a probe on the attached pid")
        await pilot.pause(1.0)
        assert f"attach pid {job.pid}" in walk_screen.sub_title
        await pilot.press("q")  # mid-probe
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
    assert job.poll() is None, "an attached job must never be stopped"
    assert psutil.Process(job.pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE)
    assert not app.launched_pids()


async def test_export_mid_walk_writes_a_partial_report(tmp_path: Path, monkeypatch, apps) -> None:
    """Export before the walk is over writes a partial report that says so."""
    monkeypatch.chdir(tmp_path)
    app = make_app(demo=True, auto=False)
    apps.append(app)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: (w := app.showing(WalkScreen)) is not None and w.session is not None, 60,
                       "the job to reach its first steps")
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), 20, "the export dialog")
        assert app.screen.query_one(Input).value == "./fieldguide-report.json"
        assert "the report will say it is partial" in screen_text(pilot)
        await pilot.press("enter")
        report = tmp_path / "fieldguide-report.json"
        await wait_for(pilot, report.exists, 20, "the partial report")
        data = json.loads(report.read_text())
        assert data["verdict"] == "inconclusive" and "partial" in data["note"]
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
