"""SVG snapshots of deterministic screens, at 80x24 (SSH) and a wide size.

The picker gets a constructed process list (the scanner is injected); the walk, departure
and export screens replay a walk recorded from a real run of the demo workload
(fixtures/demo_walk.json, written by record_fixture.py), because live numbers vary.
Regenerate after a deliberate change: pytest tests/tui -k snapshot --snapshot-update
"""

from __future__ import annotations

import pytest
from textual.pilot import Pilot
from tui_helpers import FakeScanner, wait_for
from tui_replay import replay_factory

from fieldguide.frontends.tui.app import FieldguideApp, make_app
from fieldguide.frontends.tui.dialogs.export import ConfirmOverwrite, ExportDialog
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.help import HelpScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen

NARROW, WIDE = (80, 24), (140, 40)
SIZES = pytest.mark.parametrize("size", [NARROW, WIDE], ids=["80x24", "140x40"])
SMALL = (60, 20)
EVERY_SIZE = pytest.mark.parametrize("size", [SMALL, NARROW, WIDE], ids=["60x20", "80x24", "140x40"])
DEMO_CMD = ["python", "loader_remote_reads.py"]


def picker_app() -> FieldguideApp:
    return make_app(scanner=FakeScanner())


def replay_app(hold: str | None = None, export_default: str = "./fieldguide-report.json") -> FieldguideApp:
    return make_app(cmd=DEMO_CMD, playbook_id="slow-training", session_factory=replay_factory(hold=hold),
                    export_default=export_default)


async def scanned(pilot: Pilot[object]) -> None:
    await wait_for(pilot, lambda: getattr(pilot.app.screen, "scans", 0) > 0, 30, "the first scan")


async def mid_probe(pilot: Pilot[object]) -> None:
    def measuring() -> bool:
        screen = pilot.app.screen
        return isinstance(screen, WalkScreen) and screen.state.measuring == "input.worker-startup" and bool(
            screen.panel.live.readings)

    await wait_for(pilot, measuring, 30, "input.worker-startup measuring with live readings")


async def departed(pilot: Pilot[object]) -> None:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, DepartureScreen), 30, "the departure screen")
    await wait_for(pilot, lambda: len(pilot.app.screen.query("#dep-guide")) > 0, 30, "the field guide")
    await pilot.pause(0.2)


@SIZES
def test_snapshot_picker(snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(picker_app(), terminal_size=size, run_before=scanned)


def test_snapshot_help(snap_compare) -> None:
    async def help_open(pilot: Pilot[object]) -> None:
        await scanned(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, HelpScreen), 20, "the help screen")

    assert snap_compare(picker_app(), terminal_size=NARROW, run_before=help_open)


@EVERY_SIZE
def test_snapshot_walk_in_progress(snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(replay_app(hold="loop.steps"), terminal_size=size, run_before=mid_probe)


@EVERY_SIZE
def test_snapshot_departure(snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(replay_app(), terminal_size=size, run_before=departed)


async def at_the_fixs_code(pilot: Pilot[object]) -> None:
    """The departure page scrolled to its fix: the step with a code block, wrapped at the width."""
    await departed(pilot)
    guide = pilot.app.screen.query_one("#dep-guide")
    pilot.app.screen.query_one("#dep-scroll").scroll_to_widget(guide, animate=False, top=True)
    await pilot.pause(0.2)


@EVERY_SIZE
def test_snapshot_departure_fix_with_code(snap_compare, size: tuple[int, int]) -> None:
    assert snap_compare(replay_app(), terminal_size=size, run_before=at_the_fixs_code)


def test_snapshot_walk_over(snap_compare) -> None:
    async def back_to_walk(pilot: Pilot[object]) -> None:
        await departed(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, WalkScreen), 20, "the walk screen")
        await pilot.pause(0.2)

    assert snap_compare(replay_app(), terminal_size=NARROW, run_before=back_to_walk)


def test_snapshot_export_dialog(snap_compare) -> None:
    async def export_open(pilot: Pilot[object]) -> None:
        await departed(pilot)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ExportDialog), 20, "the export dialog")
        await pilot.pause(0.2)

    assert snap_compare(replay_app(), terminal_size=NARROW, run_before=export_open)


def test_snapshot_confirm_overwrite(snap_compare, tmp_path) -> None:
    existing = tmp_path / "report.json"
    existing.write_text("{}")

    async def confirm_open(pilot: Pilot[object]) -> None:
        await departed(pilot)
        await pilot.press("e")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ExportDialog), 20, "the export dialog")
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, ConfirmOverwrite), 20, "the confirmation")
        await pilot.pause(0.2)

    # The path is shown in the dialog: use a fixed relative one inside tmp_path.
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert snap_compare(replay_app(export_default="./report.json"), terminal_size=NARROW, run_before=confirm_open)
    finally:
        os.chdir(cwd)
