"""t on the departure page: the job relaunched with the fix applied and timed against itself,
the table of arms drawn where the evidence is. A real job and agent."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from tui_helpers import wait_for

from fieldguide.tui.app import make_app
from fieldguide.tui.screens.departure import DepartureScreen
from fieldguide.tui.widgets.tryfix import TryFixPanel

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
        await pilot.press("q")
