"""Regenerate screenshots/*.svg from the real app on the real demo workload.

    .venv/bin/python scripts/screenshots.py [--size 80x24] [--out screenshots]

picker.svg     the target picker, listing a real torch job (the demo, started plainly)
walk.svg       a walk in progress: the loop probe measuring, with its live readings
departure.svg  the departure the walk stops at, with its evidence and field-guide page
tryfix.svg     the fix tried from the departure page (t): the arms, their table and the verdict
help.svg       the keys (?)
export.svg     the export dialog
watch.svg      `fieldguide watch` on a job whose loader slows 60 s in: the dashboard after the
               departure, its walk's cause in the events (about 2 minutes)

Nothing is replayed or faked: the app is made by the same `make_app` the CLI uses, the
target is launched with the agent, and the probes are the real ones (about 2 minutes in all,
the fix's arms included).
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
from fieldguide.frontends.tui.screens.help import HelpScreen
from fieldguide.frontends.tui.screens.picker import PlaybookPicker, TargetPicker
from fieldguide.frontends.tui.screens.walk import WalkScreen
from fieldguide.frontends.tui.widgets.tryfix import TryFixPanel
from fieldguide.workloads import changing

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

            await pilot.press("t")  # try the fix: the job relaunched with it, timed in turns
            panel = app.screen.query_one("#dep-tryfix", TryFixPanel)
            await wait_for(pilot, lambda: panel.result is not None, 240, "the fix's arms")
            await pilot.pause(0.5)
            save(app, out, "tryfix")

            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 10, "the help")
            save(app, out, "help")
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 10, "the departure again")

            await pilot.press("e")
            await wait_for(pilot, lambda: isinstance(app.screen, ExportDialog), 10, "the export dialog")
            save(app, out, "export")
            await pilot.press("escape")
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, 30, "the app to exit")
    finally:
        app.close_targets()


async def shoot_watch(out: Path, size: tuple[int, int]) -> None:
    """The sentinel's dashboard, launched on a changing workload, once its walk named a cause."""
    import tempfile

    from fieldguide.frontends.tui.watchapp import WatchApp
    from fieldguide.frontends.watchline import open_watch

    os.environ.update(FIELDGUIDE_WORKLOAD_SECONDS="300", FIELDGUIDE_CHANGE_AFTER_S="60")
    script = changing.path("loader_slows")
    with tempfile.TemporaryDirectory(prefix="fg-shot-") as folder:
        sentinel, target = open_watch(None, [sys.executable, str(script)], Path(folder), duration=None,
                                      fmt="json", rules_file=None)
        app = WatchApp(sentinel, target)
        try:
            async with app.run_test(size=size) as pilot:
                def named() -> bool:
                    return any(e.get("kind") == "departure" and e.get("cause") for e in sentinel.events)

                await wait_for(pilot, named, 240, "the watch's departure and its cause")
                await pilot.pause(2.0)  # the dashboard's next redraw
                save(app, out, "watch")
        finally:
            sentinel.stop("screenshots taken")
            if app.thread.is_alive():
                app.thread.join(timeout=30)
            target.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="80x24", help="terminal size, WIDTHxHEIGHT (default 80x24: SSH)")
    parser.add_argument("--out", type=Path, default=ROOT / "screenshots")
    parser.add_argument("--only", choices=("walk", "watch"), help="take one part's screenshots")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only != "walk":
        asyncio.run(shoot_watch(args.out, (width, height)))
    if args.only == "watch":
        return 0
    job = start_plain_job()
    try:
        asyncio.run(shoot(args.out, (width, height), job))
    finally:
        job.kill()
        job.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
