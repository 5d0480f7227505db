"""The compile walk in the real app: graph breaks as a table with their source lines on the
departure page, and the A/B as two sparklines on one scale. Real jobs, real agent; the jobs
compile with backend="eager" (dynamo alone) so that no test waits for inductor."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Static
from tui_helpers import wait_for

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen

pytestmark = pytest.mark.integration

PRINTS_IN_FORWARD = textwrap.dedent("""
    import time, torch
    from torch import nn
    class Net(nn.Module):
        def __init__(self):
            super().__init__(); self.a = nn.Linear(16, 16); self.b = nn.Linear(16, 2)
        def forward(self, x):
            h = torch.relu(self.a(x))
            print("mean", h.mean())
            return self.b(h)
    net = Net()
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    started = time.monotonic()
    while time.monotonic() - started < 90:
        loss = model(torch.randn(8, 16)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.005)
""")

NO_BREAKS = textwrap.dedent("""
    import time, torch
    from torch import nn
    torch.set_num_threads(1)
    net = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2))
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    started = time.monotonic()
    while time.monotonic() - started < 120:
        loss = model(torch.randn(8, 16)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.002)
""")


def evidence_text(screen: DepartureScreen) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(*(screen.query_one(f"#dep-{part}", Static).content for part in ("evidence", "detail")))  # as drawn, below the fold included
    return console.export_text()


async def test_a_graph_break_is_shown_with_its_source_line(tmp_path: Path, apps) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS_IN_FORWARD)
    app = make_app(cmd=[sys.executable, str(script)], playbook_id="compile-regression", auto=True)
    apps.append(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 120, "the departure")
        screen = app.screen
        assert screen.departure["cause"] == "compile.graph_breaks"
        text = evidence_text(screen)
        assert "What compile.graph-breaks found" in text  # the report's section for it
        assert "prints.py:9" in text  # the print's line, in the user's file
        assert "Failed to trace builtin operator" in text
        await pilot.press("q")


@pytest.mark.slow  # a full walk and relaunch (40 s); the drawing itself is tested in test_tui_units
async def test_the_ab_draws_compiled_and_eager_side_by_side(tmp_path: Path, apps) -> None:
    script = tmp_path / "no_breaks.py"
    script.write_text(NO_BREAKS)
    app = make_app(cmd=[sys.executable, str(script)], playbook_id="compile-regression", auto=True)
    apps.append(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: (w := app.showing(WalkScreen)) is not None and w.session is not None, 60,
                       "the walk screen")
        walk = app.screen

        def both_arms() -> bool:
            series = (walk.panel.live.readings.get("compile.speed", {}).get("series") or {})
            return bool(series.get("compiled_ms")) and bool(series.get("eager_ms"))

        await wait_for(pilot, both_arms, 120, "live compiled and eager step times")
        # Dynamo's wrapper around the same eager ops, in a step that mostly sleeps: no faster.
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 120, "the departure")
        assert app.screen.departure["cause"] == "compile.slower"
        text = evidence_text(app.screen)
        lines = [ln for ln in text.splitlines() if ln.startswith(("compiled ms", "eager ms"))]
        assert len(lines) == 2, text
        assert "% of compiled" in lines[1]  # one scale: eager read against compiled
        await pilot.press("q")
