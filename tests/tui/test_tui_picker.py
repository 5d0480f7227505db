"""Pilot tests of the pickers, dialogs and help: keyboard only, at 80x24."""

from __future__ import annotations

from textual.widgets import DataTable, OptionList
from tui_helpers import FAKE_PROCS, FakeScanner, screen_text, wait_for

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.dialogs.error import ErrorDialog
from fieldguide.frontends.tui.dialogs.launch import LaunchDialog
from fieldguide.frontends.tui.screens.help import HelpScreen
from fieldguide.frontends.tui.screens.picker import PlaybookPicker, TargetPicker
from fieldguide.frontends.tui.screens.walk import WalkScreen


async def test_picker_lists_processes_with_pid_user_cpu_rss_command() -> None:
    scanner = FakeScanner()
    app = make_app(scanner=scanner)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker) and app.screen.scans > 0, 20, "a scan")
        table = app.screen.query_one("#procs", DataTable)
        assert table.row_count == len(FAKE_PROCS)
        first = table.get_row_at(0)
        assert first[:4] == ["31337", "ada", "97", "2140"] and first[5].startswith("python train.py")
        text = screen_text(pilot)
        assert "the bundled demo" in text and "launch a command" in text
        assert "10240" in text  # GPU memory of the GPU process
        assert "3 processes · NVML: 1 GPU(s)" in text
        assert "d Demo" in text and "q Quit" in text and "? Help" in text  # the key bar


async def test_the_command_column_takes_the_room_of_a_resized_terminal() -> None:
    """At 80 columns the first command is cut; widened to 140 it is whole, without a rescan."""
    app = make_app(scanner=FakeScanner())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker) and app.screen.scans > 0, 20, "a scan")
        table = app.screen.query_one("#procs", DataTable)
        table.move_cursor(row=1)
        assert table.get_row_at(0)[5].endswith("…")
        scans = app.screen.scans
        await pilot.resize_terminal(140, 40)
        await wait_for(pilot, lambda: not table.get_row_at(0)[5].endswith("…"), 10, "the command widened")
        assert table.get_row_at(0)[5].startswith("python train.py --config configs/resnet50.yaml --epochs 90")
        assert app.screen.scans == scans and table.cursor_row == 1  # no rescan; the cursor stays


async def test_enter_on_a_process_opens_the_playbook_picker_with_purposes() -> None:
    app = make_app(scanner=FakeScanner())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker) and app.screen.scans > 0, 20, "a scan")
        await pilot.press("tab", "down", "enter")  # to the table, second row
        await wait_for(pilot, lambda: isinstance(app.screen, PlaybookPicker), 20, "the playbook picker")
        assert app.screen.spec.pid == 27182
        text = screen_text(pilot)
        assert "slow-training" in text and "The job trains slower than it should" in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "back to the target picker")


async def test_demo_key_preselects_slow_training() -> None:
    app = make_app(scanner=FakeScanner([]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker) and app.screen.scans > 0, 20, "a scan")
        assert "no torch processes found" in screen_text(pilot)
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, PlaybookPicker), 20, "the playbook picker")
        picker = app.screen
        assert picker.spec.demo and picker.spec.cmd[-1].endswith("loader_remote_reads.py")
        options = picker.query_one("#playbooks", OptionList)
        assert options.get_option_at_index(options.highlighted or 0).id == "slow-training"


async def test_launch_dialog_checks_the_command() -> None:
    app = make_app(scanner=FakeScanner([]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker) and app.screen.scans > 0, 20, "a scan")
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LaunchDialog), 20, "the launch dialog")
        await pilot.press(*"no-such-command-xyz --flag", "enter")
        await pilot.pause(0.1)
        assert "Command not found: no-such-command-xyz" in screen_text(pilot)
        await pilot.press("ctrl+u", *"python train.py --epochs 1", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, PlaybookPicker), 20, "the playbook picker")
        assert app.screen.spec.cmd == ("python", "train.py", "--epochs", "1")


async def test_a_pid_that_cannot_be_read_says_why_and_goes_back_to_the_picker() -> None:
    app = make_app(pid=2**22 + 17, playbook_id="slow-training", scanner=FakeScanner([]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog), 20, "the error dialog")
        assert f"no process with pid {2**22 + 17}" in screen_text(pilot)
        await pilot.press("b")
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "the target picker")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, 20, "the app to exit")
    assert app.exit_code() == 2  # bad input, as the CLI says


async def test_help_screen_lists_keys_and_closes() -> None:
    app = make_app(scanner=FakeScanner([]))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 20, "the help screen")
        text = screen_text(pilot)
        await pilot.press("pagedown")  # the help scrolls: the watch's keys follow the walk's
        await pilot.pause(0.2)
        text += screen_text(pilot)
        for key in ("next: measure the current node", "auto-walk", "re-run the node", "export the findings"):
            assert key in text
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "the picker again")


async def test_ctrl_c_quits_from_the_picker() -> None:
    app = make_app(scanner=FakeScanner([]))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
        await wait_for(pilot, lambda: not app.is_running, 20, "the app to exit")
    assert app.exit_code() == 0
    assert not any(isinstance(s, WalkScreen) for s in app.screen_stack)


def test_the_help_opens_on_the_keys_of_the_screen_it_was_asked_on() -> None:
    from fieldguide.frontends.tui.screens.departure import DepartureScreen
    from fieldguide.frontends.tui.screens.help import KEYS, ordered
    from fieldguide.frontends.tui.screens.watch import WatchScreen

    for screen in (TargetPicker, WalkScreen, DepartureScreen, WatchScreen):
        sections = [name for name, _ in ordered(screen.HELP_SECTION)]
        assert sections[:2] == [screen.HELP_SECTION, "Everywhere"] and sorted(sections) == sorted(n for n, _ in KEYS)
    assert [name for name, _ in ordered(None)] == [name for name, _ in KEYS]  # Everywhere first, as listed
