"""The departure page reads in the order a user acts on it: what decided the verdict, the fix,
then the detail (what the node found, series, stacks, the files for other viewers). The departed
node's other raw readings wait under `n`."""

from __future__ import annotations

from textual.widgets import Static
from tui_helpers import wait_for
from tui_replay import replay_factory

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen


async def test_the_fix_comes_before_the_detail_and_raw_readings_wait_under_n() -> None:
    app = make_app(cmd=["python", "loader_remote_reads.py"], playbook_id="slow-training",
                   session_factory=replay_factory())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure screen")
        await pilot.pause(0.2)
        screen = app.screen
        evidence, guide, detail = (screen.query_one(f"#dep-{name}", Static) for name in ("evidence", "guide", "detail"))
        assert evidence.region.y < guide.region.y < detail.region.y
        numbers = screen.query_one("#dep-numbers", Static)
        assert not numbers.display
        await pilot.press("n")
        await pilot.pause(0.1)
        assert numbers.display
        text = "\n".join(numbers.render_line(y).text for y in range(numbers.size.height))
        assert "Raw readings of" in text and "step_ms_median" in text
        await pilot.press("n")
        await pilot.pause(0.1)
        assert not numbers.display
        await pilot.press("q")
