"""t on the departure page: the job relaunched with the fix applied and timed against itself,
the table of arms drawn where the evidence is. A real job and agent."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from tui_helpers import wait_for

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.widgets.tryfix import TryFixPanel, arm_lines

pytestmark = pytest.mark.integration

ANOMALY_LEFT_ON = textwrap.dedent("""
    import time, torch
    torch.set_num_threads(1)
    torch.autograd.set_detect_anomaly(True)  # from a NaN hunt last week
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    end = time.monotonic() + 150
    while time.monotonic() < end:
        loss = model(torch.randn(32, 64)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
""")


@pytest.mark.slow  # a walk and a relaunch (35 s); the arms' table is tested on constructed data
async def test_t_tries_the_fix_and_draws_the_arms(tmp_path: Path, apps) -> None:
    script = tmp_path / "anomaly.py"
    script.write_text(ANOMALY_LEFT_ON)
    app = make_app(cmd=[sys.executable, str(script)], playbook_id="slow-training", auto=True)
    apps.append(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 90, "the departure")
        assert app.screen.departure["cause"] == "host.debug_mode"
        await pilot.press("t")
        panel = app.screen.query_one("#dep-tryfix", TryFixPanel)
        await wait_for(pilot, lambda: panel.result is not None, 120, "the arms")
        result = panel.result
        assert result["ran"], result
        fixed = result["arms"][1]
        assert any("anomaly=False" in a for a in fixed["applied"]), fixed
        assert fixed["vs_a"] < 0.9, result  # anomaly mode off: every step faster
        assert "helps" in result["verdict"]
        await pilot.pause(0.2)
        scroll = app.screen.query_one("#dep-scroll")  # the answer is where the user is looking
        top = panel.virtual_region.y
        assert scroll.scroll_offset.y <= top < scroll.scroll_offset.y + scroll.size.height, (top, scroll.scroll_offset)
        await pilot.press("q")


SWEPT = {"cause": "input.waiting", "ran": True, "rounds": 3, "verdict": "num_workers=8 helps", "shape": None,
         "arms": [{"arm": "as launched", "step_ms": 58.0, "step_ms_q1": 55.0, "step_ms_q3": 60.0, "steps": 144,
                   "vs_a": None, "vs_a_min": None, "vs_a_max": None, "applied": []},
                  *({"arm": f"num_workers={w}", "step_ms": 58.0 / (1 + w), "step_ms_q1": 50.0 / (1 + w),
                     "step_ms_q3": 116.0 / (1 + w), "steps": 150, "vs_a": 1 / (1 + w), "vs_a_min": 0.9 / (1 + w),
                     "vs_a_max": 1.1 / (1 + w), "applied": [f"num_workers={w} at train.py:70"]} for w in (0, 2, 8))]}


def test_the_arms_are_bars_on_one_scale_with_their_spread() -> None:
    lines = [line.plain for line in arm_lines(SWEPT, 78)]
    bars = lines[2:]
    assert len(bars) == 4 and all(len(line) <= 78 for line in lines)
    assert [line.split()[0] for line in bars] == ["as", "num_workers=0", "num_workers=2", "num_workers=8"]
    assert [line.count("█") for line in bars] == sorted((line.count("█") for line in bars), reverse=True)
    assert bars[1].count("█") + bars[1].count("─") == 78 - 14 - 10  # num_workers=0's quartile: the top
    assert bars[3].endswith(" 6.44") and arm_lines({"cause": "x", "ran": False, "why": "none"}, 78) == []


class PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield TryFixPanel(id="panel")


async def test_the_panel_draws_the_arms_under_the_table_at_80_columns() -> None:
    app = PanelApp()
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(TryFixPanel)
        panel.display = True
        panel.show_result(SWEPT)
        await pilot.pause()
        lines = [panel.render_line(y).text.rstrip() for y in range(panel.size.height)]
        assert "num_workers=8 helps" in "\n".join(lines) and "ms per step (median, ─ on to the third quartile)" in lines
        drawn = [line for line in lines if "█" in line]
        assert len(drawn) == 4 and all(len(line) <= 80 for line in lines)


async def test_while_it_runs_each_arm_is_named_by_its_change_within_80_columns() -> None:
    app = PanelApp()
    async with app.run_test(size=(80, 24)) as pilot:
        panel = app.query_one(TryFixPanel)
        panel.display = True
        panel.show_progress("num_workers=2: 40 steps timed", {
            "as launched": [58.0, 57.0, 59.0], "num_workers=2": [20.0, 21.0],
            "persistent_workers=true pin_memory=true": [55.0], "num_workers=8": []})
        await pilot.pause()
        lines = [panel.render_line(y).text.rstrip() for y in range(panel.size.height)]
        assert lines[0].startswith("Trying the fix: num_workers=2: 40 steps timed")
        assert [line.split()[0] for line in lines[1:4]] == ["as", "num_workers=2", "persistent_work…"]
        assert all(len(line) <= 80 for line in lines) and not any("num_workers=8" in line for line in lines)
