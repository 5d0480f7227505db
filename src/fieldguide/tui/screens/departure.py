"""The departure: the cause, the evidence (the numbers, the series, the top stacks), and the
field-guide page (why, fix with code, verify) as Markdown. m re-measures to check a fix."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Markdown, Static

from fieldguide.measurement import format_value
from fieldguide.probes.stats import median
from fieldguide.tui.model import (
    departure_markdown,
    measured_vs_expected,
    series,
    sparkline,
    top_stacks,
)
from fieldguide.tui.widgets.live import LiveReadings

if TYPE_CHECKING:
    from fieldguide.engine import Departure, NodeResult
    from fieldguide.tui.screens.walk import WalkScreen

STACK_FRAMES = 3  # innermost frames shown per stack; the report has them all
HEADLINE_VALUES = ("steps", "steps_per_second", "step_ms_median", "step_ms_p90", "data_wait_ms_median",
                   "samples", "workers", "producer", "debug_switches")


class DepartureScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,w", "back", "Walk", tooltip="Back to the walk"),
        Binding("m", "remeasure", "Re-measure", tooltip="Measure the departure again (check a fix)"),
        Binding("e", "export", "Export"),
    ]

    def __init__(self, walk_screen: WalkScreen) -> None:
        super().__init__()
        self.walk_screen = walk_screen
        assert walk_screen.session is not None and walk_screen.session.walk.departure is not None
        self.departure: Departure = walk_screen.session.walk.departure
        path = walk_screen.session.walk.path
        ids = [r.node for r in path]
        start = ids.index(self.departure.node) if self.departure.node in ids else 0
        self.chain: list[NodeResult] = path[start:]

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with VerticalScroll(id="dep-scroll"):
            yield Static(self._banner(), id="dep-banner")
            yield Static("", id="dep-remeasure")
            yield LiveReadings(id="dep-live")
            yield Static(self._evidence(), id="dep-evidence")
            yield Markdown(departure_markdown(self.departure), id="dep-guide")
        yield Footer()

    @property
    def live(self) -> LiveReadings:
        return self.query_one("#dep-live", LiveReadings)

    def on_mount(self) -> None:
        self.title = "departure"
        self.sub_title = f"{self.departure.cause.id} at {self.departure.node}"
        self.query_one("#dep-remeasure").display = False
        self.live.display = False
        ws = self.walk_screen
        if ws.op == "remeasure":
            self.remeasure_progress(ws.remeasure_text)
        elif ws.remeasure_result is not None:
            self.remeasure_finished(*ws.remeasure_result)
        self.query_one("#dep-scroll").focus()

    def on_unmount(self) -> None:
        self.walk_screen.departure_closed()

    # -- content ---------------------------------------------------------------------------------------

    def _banner(self) -> Group:
        d = self.departure
        probes = ", ".join(dict.fromkeys(r.probe for r in self.chain if r.probe))
        return Group(
            Text.assemble(("✗ ", "bold red"), (d.cause.id, "bold red reverse"), "  ", (d.cause.title, "bold")),
            Text.assemble(("departed at ", "dim"), (d.node, "bold"), (f" · measured by {probes}" if probes else "",
                                                                       "dim")),
            Text(""),
            Text(d.summary),
        )

    def _evidence(self) -> Group:
        parts: list[RenderableType] = [Text("")]
        parts.append(Text("Evidence", style="bold underline"))
        table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
        for name in ("node", "value", "measured", "expected", ""):
            table.add_column(name, no_wrap=True, style="bold" if name == "value" else "")
        for result in self.chain:
            node = self.walk_screen.playbook.nodes[result.node]
            for i, row in enumerate(measured_vs_expected(node, result)):
                mark = ("✓", "green") if row.held else ("✗", "bold red") if row.held is False else ("?", "magenta")
                table.add_row(result.node if i == 0 else "", row.name, row.measured, row.expected, Text(*mark))
        parts.append(table)
        numbers = []
        for result in self.chain:
            if result.measurement is None:
                continue
            m = result.measurement
            for name in HEADLINE_VALUES:
                if name in m.values and m.values[name] is not None:
                    numbers.append(f"{name} {format_value(m.values[name], m.units.get(name, ''))}")
        if numbers:
            parts.append(Text("numbers: " + " · ".join(dict.fromkeys(numbers)), style="dim"))
        width = max(16, min(48, self.app.size.width - 40))
        found = series(self.departure)
        step, wait = found.get("step_ms", []), found.get("data_wait_ms", [])
        if step:
            top = max(step + wait)
            parts.append(Text(""))
            parts.append(Text.assemble(("step ms  ", "bold"), (sparkline(step, width, top), "cyan"),
                                       f" median {median(step) or 0:.1f} ({len(step)} steps)"))
            if wait:
                med_s, med_w = median(step) or 0.0, median(wait) or 0.0
                share = f", {med_w / med_s:.0%} of a step" if med_s else ""
                parts.append(Text.assemble(("wait ms  ", "bold"), (sparkline(wait, width, top), "red"),
                                           f" median {med_w:.1f}{share}"))
        if found.get("rss_mb"):
            rss = found["rss_mb"]
            parts.append(Text.assemble(("RSS MB   ", "bold"), (sparkline(rss, width), "magenta"), f" {rss[-1]:.0f}"))
        stacks = top_stacks(self.departure)
        if stacks:
            parts.append(Text(""))
            parts.append(Text("Top stacks (main thread, innermost frame first)", style="bold"))
            for s in stacks:
                part = s.get("share")
                frames = str(s.get("stack", "")).split(" ← ")
                stack = " ← ".join(frames[:STACK_FRAMES]) + (" ← …" if len(frames) > STACK_FRAMES else "")
                parts.append(Text.assemble((f"{part:4.0%} " if isinstance(part, (int, float)) else "     ", "bold"),
                                           (f"{s.get('category', '')}  ", "yellow"), stack))
        provenance = [f"{r.node}: {r.measurement.provenance}" for r in self.chain
                      if r.measurement is not None and r.measurement.provenance]
        if provenance:
            parts.append(Text(""))
            parts.append(Text("How it was measured: " + "; ".join(provenance), style="dim italic"))
        return Group(*parts)

    # -- re-measure --------------------------------------------------------------------------------------

    def remeasure_progress(self, text: str) -> None:
        box = self.query_one("#dep-remeasure", Static)
        box.display = True
        box.update(Text.assemble(("Re-measuring… ", "bold yellow"), text))
        self.live.display = True
        self.query_one("#dep-scroll", VerticalScroll).scroll_home(animate=False)

    def remeasure_finished(self, rows: list[tuple[str, NodeResult | None, NodeResult]], note: str) -> None:
        self.live.display = False
        box = self.query_one("#dep-remeasure", Static)
        box.display = True
        if not rows:
            box.update(Text.assemble(("! Could not re-measure: ", "bold magenta"), note or "nothing measured"))
            return
        node_id, before, after = rows[0]
        if after.status == "pass":
            head = Text(f"✓ Fixed: {node_id} now passes.", style="bold green")
        elif after.status == "depart":
            head = Text(f"✗ Still departs at {node_id}: the fix is not in yet.", style="bold red")
        else:
            head = Text(f"! Could not re-measure {node_id}: {after.note}", style="bold magenta")
        table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
        for name in ("node", "value", "before", "now", ""):
            table.add_column(name, no_wrap=True)
        for nid, old, new in rows:
            units = new.measurement.units if new.measurement is not None else {}
            for i, name in enumerate(new.measured or (old.measured if old else {})):
                was = format_value(old.measured.get(name), units.get(name, "")) if old else "n/a"
                now = format_value(new.measured.get(name), units.get(name, ""))
                table.add_row(nid if i == 0 else "", name, was, now, new.status if i == 0 else "")
        parts: list[RenderableType] = [head, table]
        if note:
            parts.append(Text(note, style="dim"))
        parts.append(Text(""))
        box.update(Group(*parts))

    # -- actions -----------------------------------------------------------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_remeasure(self) -> None:
        self.walk_screen.action_remeasure()

    def action_export(self) -> None:
        self.walk_screen.action_export()
