"""The watch's dashboard at 80x24: the series with their baselines, the events as they come, Enter
on a departure opens its page, q stops the watch. The sentinel is real; its source is a
constructed job whose steps slow down 4 s in, and its walk a stand-in returning a recorded
report (fixtures/watch_departure.json, a real watch's slow-training walk)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from textual.widgets import DataTable
from tui_helpers import screen_text, wait_for

from fieldguide.frontends.tui.screens.watch import EventScreen, WatchScreen
from fieldguide.frontends.tui.watchapp import WatchApp
from fieldguide.frontends.watchline import event_line
from fieldguide.report import load_report
from fieldguide.watch.detect import SeriesShape
from fieldguide.watch.rules import load_rules
from fieldguide.watch.sentinel import Sentinel
from fieldguide.watch.sources import Polled

FIXTURE = Path(__file__).with_name("fixtures") / "watch_departure.json"


class SlowingSource:
    kind = "launch"
    shape = SeriesShape()

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.last = self.started
        self.steps = 0

    def poll(self, now: float) -> Polled:
        polled = Polled()
        while self.last + 0.02 <= now:
            self.last += 0.02
            self.steps += 1
            slow = self.last - self.started > 4
            polled.add("step_ms", self.last, 80.0 if slow else 20.0)
            polled.add("input_share", self.last, 0.1)
            polled.add("memory_mb", self.last, 500.0)
        polled.steps_total = self.steps
        return polled

    def missing(self) -> dict[str, str]:
        return {"gpu_util": "NVML unavailable: no driver here"}

    def hold(self, holding: bool) -> None:
        pass

    def job_alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


class Target:
    pid = 4242

    def alive(self) -> bool:
        return True

    def gone_reason(self) -> str:
        return ""

    def describe(self) -> dict[str, Any]:
        return {"kind": "launch", "pid": self.pid}

    def close(self) -> None:
        pass


def recorded_walk(playbook: str, target: Any) -> Any:
    findings = load_report(FIXTURE)
    return SimpleNamespace(run=lambda: findings, cancel=lambda note: None,
                           runner=SimpleNamespace(discard_artifacts=lambda: None))


async def test_the_dashboard_draws_series_lists_events_and_opens_a_departure(tmp_path: Path) -> None:
    base = load_rules()
    signals = tuple(replace(s, sustain_s=1.0) for s in base.signals)
    rules = replace(base, warmup_s=0.5, learn_s=2.0, window_s=1.0, signals=signals)
    sentinel = Sentinel(Target(), SlowingSource(), rules, tmp_path, session_factory=recorded_walk)
    app = WatchApp(sentinel, Target())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, WatchScreen) and sentinel.baseline, 20, "a baseline")
        await wait_for(pilot, lambda: sentinel.departures >= 1, 30, "a departure")
        await pilot.pause(1.2)  # a redraw and the event's row
        text = screen_text(pilot)
        assert "step 80.0 ms" in text and "baseline 20.0 ms" in text
        assert "GPU busy: not measured here (NVML unavailable" in text
        assert "input.waiting" in text  # the departure's row
        table = app.screen.query_one("#watch-events", DataTable)
        # A long event wraps at the screen's width instead of being cut at 80 columns.
        lines = [table.render_line(y).text.rstrip() for y in range(table.size.height)]
        assert all(len(line) <= 80 for line in lines)
        departure = next(e for e in sentinel.events if e["kind"] == "departure")
        said = event_line(departure).strip()
        assert len(said) > 76  # wider than the screen: its end (the report's path) is still shown
        assert said.replace(" ", "")[-30:] in "".join(line.replace(" ", "") for line in lines), lines
        table.move_cursor(row=table.row_count - 1)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, EventScreen), 10, "the departure's page")
        assert "input.waiting" in screen_text(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, WatchScreen), 10, "back to the dashboard")
        await pilot.press("q")
        await wait_for(pilot, lambda: sentinel.ended is not None, 20, "the watch to stop")
    assert sentinel.ended == "quit by the user"
    kinds = [e["kind"] for e in sentinel.events]
    assert kinds[:4] == ["start", "baseline", "departing", "departure"] and kinds[-1] == "end", kinds


async def test_a_watch_given_a_duration_returns_by_itself_with_its_status(tmp_path: Path) -> None:
    """`watch --duration N` in tmux or a script: the dashboard ends the app when the time is up,
    with no key pressed (it had said "ended" and waited for q)."""
    sentinel = Sentinel(Target(), SlowingSource(), load_rules(), tmp_path, duration=2.0,
                        session_factory=recorded_walk)
    app = WatchApp(sentinel, Target())
    started = time.monotonic()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: app.return_code is not None or not app.is_running, 20, "the app to exit")
    assert sentinel.ended == "watched for 2 s"
    assert app.return_code == sentinel.exit_status
    assert time.monotonic() - started < 15


async def test_a_watch_that_ends_after_its_dashboard_is_gone_says_nothing_on_the_way_out(tmp_path: Path) -> None:
    """q, then the sentinel's last walk ends: its thread once raised ScreenStackError ("No screens
    on stack") onto the user's terminal after the TUI had gone."""
    import threading

    release = threading.Event()
    sentinel = Sentinel(Target(), SlowingSource(), load_rules(), tmp_path, session_factory=recorded_walk)
    sentinel.run = lambda: release.wait(20) and "released"  # type: ignore[method-assign]
    raised: list[BaseException] = []
    before = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)  # type: ignore[assignment,arg-type]
    try:
        app = WatchApp(sentinel, Target())
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.thread.is_alive(), 10, "the sentinel's thread")
        release.set()
        app.thread.join(10)
    finally:
        threading.excepthook = before
    assert not app.thread.is_alive() and raised == []
