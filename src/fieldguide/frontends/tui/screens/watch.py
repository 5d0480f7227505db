"""The sentinel's dashboard: each series over the whole session with its baseline, the phase,
and the events; Enter on a departure opens its page (the summary the report was written from).
The sentinel runs on a worker thread; the screen redraws from its store once a second."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from fieldguide.frontends.tui.model import HEADER_ICON
from fieldguide.frontends.tui.widgets.watchchart import SeriesChart
from fieldguide.frontends.watchline import (
    SERIES_LABELS,
    event_line,
    level_text,
    slope_series,
    value_text,
)
from fieldguide.watch.rules import SERIES

if TYPE_CHECKING:
    from fieldguide.watch.sentinel import Sentinel

PHASES = {"waiting": "waiting for the first training steps", "warming": "warming up (not judged)",
          "learning": "learning the job's baseline", "watching": "watching", "walking": "walking a playbook",
          "settling": "settling after the walk"}


class WatchEvent(Message):
    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__()
        self.event = event


EVENTS_LABEL = "events (Enter opens a departure)"


class WatchEnded(Message):
    pass


class WatchScreen(Screen[None]):
    HELP_SECTION = "Watch (fieldguide watch)"  # its keys first in the help
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_event", "Open event", show=True),
    ]

    def __init__(self, sentinel: Sentinel) -> None:
        super().__init__()
        self.sentinel = sentinel
        self.rows: dict[str, dict[str, Any]] = {}  # table row key -> event

    def compose(self) -> ComposeResult:
        yield Header(show_clock=True, icon=HEADER_ICON)
        yield Static("", id="watch-status")
        with VerticalScroll(id="watch-body"):
            yield Static("", id="watch-charts")
            yield DataTable(id="watch-events", cursor_type="row", zebra_stripes=False)
        yield Footer()

    def on_mount(self) -> None:
        self.title = "fieldguide watch"
        self.sub_title = f"pid {self.sentinel.target.pid}"
        self.query_one("#watch-events", DataTable).add_column(EVENTS_LABEL, key="line", width=self.event_width())
        self.redraw()
        self.set_interval(1.0, self.redraw)

        def heard(event: dict[str, Any]) -> None:
            self.post_message(WatchEvent(event))

        self.sentinel.on_event = heard  # the app runs the sentinel on its own thread (watchapp.py)
        for event in list(self.sentinel.events):  # emitted before the screen listened
            self.post_message(WatchEvent(event))

    def event_width(self) -> int:
        """The events column: the screen's width, so that a long event wraps instead of being cut."""
        return max(30, (self.size.width or self.app.size.width) - 4)

    @on(WatchEvent)
    def add_event(self, message: WatchEvent) -> None:
        key = str(len(self.rows))
        self.rows[key] = message.event
        self._add_row(key, message.event)
        table = self.query_one("#watch-events", DataTable)
        table.move_cursor(row=table.row_count - 1)

    def _add_row(self, key: str, event: dict[str, Any]) -> None:
        style = "bold" if event["kind"] == "departure" else ""
        self.query_one("#watch-events", DataTable).add_row(Text(event_line(event).strip(), style=style),
                                                           key=key, height=None)

    def on_resize(self) -> None:
        """The rows' heights follow the width they wrap at: the table is laid out again."""
        table = self.query_one("#watch-events", DataTable)
        if table.columns and next(iter(table.columns.values())).width == self.event_width():
            return
        cursor = table.cursor_row
        table.clear(columns=True)
        table.add_column(EVENTS_LABEL, key="line", width=self.event_width())
        for key, event in self.rows.items():
            self._add_row(key, event)
        if self.rows:
            table.move_cursor(row=min(cursor, table.row_count - 1))

    @on(WatchEnded)
    def ended(self) -> None:
        self.redraw()

    def status_text(self) -> Text:
        s = self.sentinel
        if s.ended is not None:
            return Text(f"ended: {s.ended} · {s.departures} departure(s) · reports in {s.report_dir}")
        since = s.clock() - s.started
        phase = PHASES.get(s.phase, s.phase)
        walking = s.walking  # read once: the sentinel's thread may collect it meanwhile
        if walking is not None:
            phase = f"walking {walking.playbook} ({s.clock() - walking.started:.0f} s)"
        return Text(f"{since:,.0f} s · {phase} · {s.departures} departure(s) · reports in {s.report_dir}")

    def charts(self) -> RenderableType:
        s = self.sentinel
        with s.lock:
            history = {k: [v for _, v in points] for k, points in s.store.history.items()}
            latest = {k: s.store.latest(k) for k in SERIES}
            ranks = {r: (points[-1][1] if points else None) for r, points in s.store.ranks.items()}
            baseline = dict(s.baseline)
        missing = s.source.missing()
        slopes = slope_series(s.rules)
        parts: list[RenderableType] = []
        said_missing: list[str] = []
        for series in SERIES:
            label = SERIES_LABELS[series]
            if series not in history and series in missing:
                if missing[series] in said_missing:
                    continue  # one reason for several series (no NVML at all): said once
                said_missing.append(missing[series])
                parts.append(Text(f"{label}: not measured here ({missing[series]})", style="dim"))
                continue
            if series not in history:
                continue
            base = baseline.get(series)
            said = f"baseline {value_text(series, base)}" if base is not None else "baseline: learning"
            head = f"{label} {level_text(series, latest.get(series))}  ({said})"
            # a slope's baseline is no level on the chart
            parts.append(SeriesChart(head, history[series], None if series in slopes else base))
        if ranks:
            known = {r: v for r, v in ranks.items() if v is not None}
            if known:
                slowest = max(known, key=lambda r: known[r])
                fastest = min(known, key=lambda r: known[r])
                parts.append(Text(f"ranks {len(ranks)}: slowest step rank {slowest} {known[slowest]:.1f} ms, "
                                  f"fastest rank {fastest} {known[fastest]:.1f} ms"))
        return Group(*parts) if parts else Text("no series yet", style="dim")

    def redraw(self) -> None:
        self.query_one("#watch-status", Static).update(self.status_text())
        self.query_one("#watch-charts", Static).update(self.charts())

    def action_open_event(self) -> None:
        table = self.query_one("#watch-events", DataTable)
        if not table.row_count:
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        event = self.rows.get(str(key))
        findings = self.sentinel.findings_of(event) if event else None
        if event is None or findings is None:
            self.notify("only a departure's walk has a page", severity="information")
            return
        self.app.push_screen(EventScreen(findings, event_line(event).strip()))


class EventScreen(Screen[None]):
    """A departure the watch walked: its summary, as the headless walk prints it."""

    HELP_SECTION = "Watch (fieldguide watch)"  # its keys first in the help

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,w", "back", "Watch")]

    def __init__(self, findings: Any, headline: str) -> None:
        super().__init__()
        self.findings, self.headline = findings, headline

    def compose(self) -> ComposeResult:
        from fieldguide.report.summary import summary_panel

        yield Header(show_clock=False, icon=HEADER_ICON)
        with VerticalScroll(id="event-scroll"):
            yield Static(Text(self.headline, style="bold"))
            yield Static(summary_panel(self.findings))
        yield Footer()

    def on_mount(self) -> None:
        self.title = "departure"
        first = self.findings.first_departure or {}
        self.sub_title = str(first.get("cause") or self.findings.verdict)

    def action_back(self) -> None:
        self.app.pop_screen()
