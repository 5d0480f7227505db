"""A tree line cut at the pane's width (30 columns at 80x24) has its whole text in the panel: the
line where a walk ends with no cause reads in full when the cursor is on it."""

from __future__ import annotations

from tui_helpers import screen_text, wait_for
from tui_replay import replay_factory

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen

REASON = "not a training job, so no cause"


async def test_the_cursor_on_a_stop_line_shows_its_whole_reason() -> None:
    app = make_app(cmd=["python", "loader_remote_reads.py"], playbook_id="slow-training",
                   session_factory=replay_factory())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
        await pilot.press("escape")
        walk = app.showing(WalkScreen)
        assert walk is not None
        await wait_for(pilot, lambda: app.screen is walk, 10, "the walk")
        assert REASON not in screen_text(pilot)  # the tree's line is cut
        tree = walk.playbook_tree
        tree.focus()
        for _ in range(3):
            await pilot.press("home")
        for _ in range(40):
            if tree.cursor_item is not None and tree.cursor_item[0] == "stop":
                break
            await pilot.press("down")
        assert tree.cursor_item is not None and tree.cursor_item[0] == "stop", tree.cursor_item
        await pilot.pause()
        assert REASON in screen_text(pilot)
