"""The oom walk in the real app: a live memory line while it measures, and memory by category
drawn as bars on the departure page. Real jobs, real agent; no fakes."""

from __future__ import annotations

import io
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Static
from tui_helpers import screen_text, wait_for

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen

pytestmark = pytest.mark.integration

KEEPS_OUTPUTS = textwrap.dedent("""
    import time, torch
    model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept = []  # "for the epoch's metrics": every step's logits, with their graph
    started = time.monotonic()
    while time.monotonic() - started < 90:
        logits = model(torch.randn(64, 128))
        loss = logits.square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        kept.append(logits)
        time.sleep(0.01)
""")

BATCH_TOO_BIG = textwrap.dedent("""
    import os, resource, torch
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.randn(1, 3, 32, 32)).sum().backward()
    with open("/proc/self/statm") as f:
        vms = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vms + 700 * 2**20, vms + 700 * 2**20))
    for step in range(100):
        x = torch.randn(64, 3, 128, 128)
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
""")


async def test_a_leak_shows_memory_live_then_departs_naming_what_keeps_it(tmp_path: Path, apps) -> None:
    script = tmp_path / "keeps_outputs.py"
    script.write_text(KEEPS_OUTPUTS)
    app = make_app(cmd=[sys.executable, str(script)], playbook_id="oom", auto=True)
    apps.append(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: (w := app.showing(WalkScreen)) is not None and w.session is not None, 60,
                       "the walk screen")
        walk = app.screen

        def memory_line() -> bool:
            reading = walk.panel.live.readings.get("memory.growth", {})
            return len((reading.get("series") or {}).get("used_mb") or []) > 5

        await wait_for(pilot, memory_line, 60, "live memory readings")
        assert "used mb" in screen_text(pilot)
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 90, "the departure")
        text = screen_text(pilot)
        assert "memory.leak_across_steps" in text and "departed at memory.growth" in text
        assert "tensors_kept_per_step" in text
        await pilot.press("q")


async def test_an_oom_in_the_first_step_is_broken_down_as_bars(tmp_path: Path, apps) -> None:
    script = tmp_path / "batch_too_big.py"
    script.write_text(BATCH_TOO_BIG)
    app = make_app(cmd=[sys.executable, str(script)], playbook_id="oom", auto=True)
    apps.append(app)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 90, "the departure")
        screen = app.screen
        assert screen.departure["cause"] == "memory.activations"
        console = Console(width=80, record=True, file=io.StringIO())
        console.print(*(screen.query_one(f"#dep-{part}", Static).content for part in ("evidence", "detail")))  # as drawn, below the fold included
        text = console.export_text()
        assert "shares of what was counted" in text
        bars = [line for line in text.splitlines() if line.startswith("activations") and "█" in line]
        assert bars, text
        assert "can't allocate memory" in text or "RuntimeError" in text  # how the job ended
        await pilot.press("q")
