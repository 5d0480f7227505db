"""Regenerate screenshots/*.svg from the real app on the real demo workload.

    .venv/bin/python scripts/screenshots.py [--size 100x32] [--out screenshots]

picker.svg     the target picker, listing a real torch job (the demo, started plainly)
walk.svg       a walk in progress: the loop probe measuring, with its live readings
departure.svg  the departure the walk stops at, with its evidence and field-guide page
export.svg     the export dialog

Nothing is replayed or faked: the app is made by the same `make_app` the CLI uses, the
target is launched with the agent, and the probes are the real ones (about 40 s in all).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot

from fieldguide import workloads
from fieldguide.frontends.tui.app import FieldguideApp, make_app
from fieldguide.frontends.tui.dialogs.export import ExportDialog
from fieldguide.frontends.tui.procscan import ProcessScanner
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.picker import PlaybookPicker, TargetPicker
from fieldguide.frontends.tui.screens.walk import WalkScreen

ROOT = Path(__file__).resolve().parents[1]


async def wait_for(pilot: Pilot[object], predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"screenshots: timed out waiting for {what}")
        await pilot.pause(0.1)
    await pilot.pause(0.3)


def save(app: FieldguideApp, out: Path, name: str) -> None:
    path = out / f"{name}.svg"
    path.write_text(app.export_screenshot(title=f"fieldguide · {name}"), encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=sys.stderr)


def start_plain_job() -> subprocess.Popen[bytes]:
    """The demo as a user would run it (no agent), for the picker to find."""
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="60")
    return subprocess.Popen([sys.executable, str(workloads.path(workloads.DEMO))], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def shoot(out: Path, size: tuple[int, int], job: subprocess.Popen[bytes]) -> None:
    app = make_app(scanner=ProcessScanner())
    try:
        async with app.run_test(size=size) as pilot:
            def listed() -> bool:
                return isinstance(app.screen, TargetPicker) and job.pid in app.screen.rows

            await wait_for(pilot, listed, 60, "the demo job in the picker")
            await pilot.pause(2.5)  # a second scan: CPU% over the last interval
            save(app, out, "picker")
            job.kill()

            await pilot.press("d")  # the bundled demo, launched with the agent
            await wait_for(pilot, lambda: isinstance(app.screen, PlaybookPicker), 10, "the playbook picker")
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, WalkScreen), 10, "the walk")
            walk = app.screen
            assert isinstance(walk, WalkScreen)

            def mid_probe() -> bool:
                reading = walk.panel.live.readings.get("loop.steps", {})
                return walk.state.measuring == "input.worker-startup" and (reading.get("elapsed") or 0) > 3.5

            await wait_for(pilot, mid_probe, 90, "the loop probe half-way")
            save(app, out, "walk")

            await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 90, "the departure")
            await wait_for(pilot, lambda: len(app.screen.query("#dep-guide")) > 0, 10, "the field guide")
            save(app, out, "departure")

            await pilot.press("e")
            await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), 10, "the export dialog")
            save(app, out, "export")
            await pilot.press("escape")
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
    finally:
        app.close_targets()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="100x32", help="terminal size, WIDTHxHEIGHT (default 100x32)")
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    job = start_plain_job()
    try:
        asyncio.run(shoot(args.out, (width, height), job))
    finally:
        job.kill()
        job.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
