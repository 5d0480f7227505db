"""The departure: the cause, what decided it (measured against expected), the field-guide page
(why, fix with code, verify) as the headless summary draws it, then the detail: what the node
found, the series, the top stacks and the files for other viewers. m re-measures to check a fix;
n shows the departed node's other raw readings.

Drawn from the walk's `Findings`, the object the reports and the headless summary read, with
the same status vocabulary and the report's own sections (report/sections.py) where a report
draws the same thing. Series are the ones the probes declare."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from fieldguide.frontends.tui.messages import (
    ExportRequested,
    LiveUpdate,
    MeterSample,
    RemeasureDone,
    RemeasureRequested,
    RemeasureStatus,
)
from fieldguide.frontends.tui.model import (
    HEADER_ICON,
    declared_parts,
    expectation_rows,
    label,
    part_bars,
    series_lines,
)
from fieldguide.frontends.tui.widgets.live import LiveReadings
from fieldguide.frontends.tui.widgets.tryfix import TryFixPanel
from fieldguide.measurement import format_value
from fieldguide.report.charts import series_groups
from fieldguide.report.evidence_sections import FINDING, evidence_sections, top_stacks
from fieldguide.report.section_types import FixPage
from fieldguide.report.sections import also_departing, artifact_sections, brief
from fieldguide.report.summary import FOUND_ROWS
from fieldguide.report.terminal import TimelineBar, renderables
from fieldguide.report.timeline import cold_start_of
from fieldguide.report.vocabulary import (
    DEPART,
    ERROR,
    GLYPH,
    HELD_GLYPH,
    HELD_STYLE,
    PASS,
    STYLE,
    status_mark,
)

if TYPE_CHECKING:
    from textual import getters

    from fieldguide.frontends.tui.app import FieldguideApp
    from fieldguide.frontends.tui.driver import WalkDriver
    from fieldguide.frontends.tui.walkstate import Remeasure, RemeasureRows
    from fieldguide.playbook import Playbook
    from fieldguide.report.findings import Departure, Findings

STACKS = 3  # top stacks shown; the report has them all


class DepartureScreen(Screen[None]):
    HELP_SECTION = "Departure"  # its keys first in the help
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,w", "back", "Walk", tooltip="Back to the walk"),
        Binding("m", "remeasure", "Re-measure", tooltip="Measure the departure again (check a fix)"),
        Binding("t", "try_fix", "Try fix", tooltip="Relaunch the job with the fix applied and time both"),
        Binding("e", "export", "Export"),
        Binding("n", "numbers", "Numbers", tooltip="Show or hide the departed node's other raw readings"),
    ]

    if TYPE_CHECKING:
        app = getters.app(FieldguideApp)

    def __init__(self, findings: Findings, playbook: Playbook, remeasure: Remeasure,
                 driver: WalkDriver | None = None) -> None:
        super().__init__()
        assert findings.first_departure is not None
        self.findings, self.playbook, self.remeasure = findings, playbook, remeasure
        self.driver = driver  # the walk's, which relaunches the job to try the fix
        self.departure: Departure = findings.first_departure
        self.chain = findings.chain()

    def compose(self) -> ComposeResult:
        d = self.departure
        yield Header(show_clock=False, icon=HEADER_ICON)
        with VerticalScroll(id="dep-scroll"):
            yield Static(self._banner(), id="dep-banner")
            yield Static("", id="dep-remeasure")
            yield TryFixPanel(id="dep-tryfix")
            yield LiveReadings(id="dep-live")
            table, shown = self._evidence_table()
            self.numbers = self._numbers(shown)
            yield Static(Group(Text(""), Text("Evidence", style="bold underline"), table), id="dep-evidence")
            yield Static(self.numbers or "", id="dep-numbers")
            # The page as the headless summary draws it (report/terminal.py): code in a fix wraps at
            # the terminal's width instead of running off an 80-column screen.
            yield Static(Group(*renderables([FixPage(d.get("why", ""), tuple(d["fix"]), d["verify"])])),
                         id="dep-guide")
            yield Static(self._detail(), id="dep-detail")
        yield Footer()

    @property
    def live(self) -> LiveReadings:
        return self.query_one("#dep-live", LiveReadings)

    def on_mount(self) -> None:
        self.title = "departure"
        self.sub_title = f"{self.departure['cause']} at {self.departure['node']}"
        self.query_one("#dep-remeasure").display = False
        self.query_one("#dep-numbers").display = False
        self.live.display = False
        if self.remeasure.running:
            self.remeasure_progress(self.remeasure.text)
        elif self.remeasure.rows is not None:
            self.remeasure_finished(self.remeasure.rows, self.remeasure.note)
        self.query_one("#dep-scroll").focus()

    # -- content ---------------------------------------------------------------------------------------

    def _banner(self) -> Group:
        d = self.departure
        probes = ", ".join(dict.fromkeys(str(step["probe"]) for step in self.chain if step.get("probe")))
        return Group(
            Text.assemble((GLYPH[DEPART] + " ", STYLE[DEPART]), (d["cause"], f"{STYLE[DEPART]} reverse"), "  ",
                          (d["title"], "bold")),
            Text.assemble(("departed at ", "dim"), (d["node"], "bold"),
                          (f" · measured by {probes}" if probes else "", "dim")),
            Text(""),
            Text(d["summary"]),
        )

    def _evidence_table(self) -> tuple[Table, set[str]]:
        table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
        for name in ("node", "value", "measured", "expected", ""):
            table.add_column(name, no_wrap=True, style="bold" if name == "value" else "")
        shown: set[str] = set()
        for step in self.chain:
            node = self.playbook.nodes.get(step["node"])
            if node is None:
                continue
            values = self.findings.evidence.get(step["node"], {}).get("values") or step["measured"]
            for i, row in enumerate(expectation_rows(node, step.get("probe"), values, self.findings.units)):
                table.add_row(step["node"] if i == 0 else "", row.name, row.measured, row.expected,
                              Text(HELD_GLYPH[row.held], style=HELD_STYLE[row.held]))
                shown.add(row.name)
        return table, shown

    def _numbers(self, shown: set[str]) -> Text | None:
        """The departed node's other measured values (those the evidence table does not show), with
        their units (under `n`: raw readings are for checking, and would stand between the verdict
        and its fix)."""
        values = self.findings.evidence.get(self.departure["node"], {}).get("values") or {}
        words = [f"{name} {format_value(value, self.findings.units.get(name, ''))}" for name, value in values.items()
                 if name not in shown and value is not None and not isinstance(value, (list, dict))]
        if not words:
            return None
        return Text.assemble((f"Raw readings of {self.departure['node']} (n hides them)\n", "bold"),
                             (" · ".join(words), "dim"))

    def _series(self) -> list[RenderableType]:
        """The chain's per-step series (step time and its wait, memory per step) as sparklines: the
        series the HTML report draws (report/charts.py), each once."""
        drawn: dict[str, tuple[list[float], str]] = {}
        for group in series_groups(self.findings, [step["node"] for step in self.chain]):
            for series in group.series:
                drawn.setdefault(series.name, ([v for v in series.values if v is not None], series.unit))
        label_w = max([8] + [len(label(name)) + 1 for name in drawn])
        width = max(16, min(48, self.app.size.width - label_w - 30))
        lines = series_lines({n: v for n, (v, _) in drawn.items()}, {n: u for n, (_, u) in drawn.items()}, width)
        return [Text.assemble((f"{line.label:<{label_w}}", "bold"), (line.drawing, line.style), line.suffix)
                for line in lines]

    def _bars(self) -> list[RenderableType]:
        """Values a probe declares as parts of one whole (memory by category), as bars."""
        lines: list[RenderableType] = []
        for step in self.chain:
            evidence = self.findings.evidence.get(step["node"], {})
            names = declared_parts(evidence.get("probe"))
            bars = part_bars(evidence.get("values") or {}, names, max(10, min(40, self.app.size.width - 30)))
            if bars and not lines:
                lines += [Text(""), Text(f"{step['node']}: shares of what was counted", style="bold")]
                label_w = max(len(name) for name, _, _ in bars) + 1
                lines += [Text.assemble((f"{name:<{label_w}}", "bold"), (bar, "magenta"), f" {share}")
                          for name, bar, share in bars]
        return lines

    def _rows(self) -> list[RenderableType]:
        """What the departed node found (graph breaks with their source lines, recompiles with their
        guard failures, ranks): the report's sections for it, drawn for a terminal."""
        return renderables(brief(evidence_sections(self.findings, FINDING), FOUND_ROWS))

    def _timeline(self) -> tuple[list[RenderableType], bool]:
        """The cold start as one bar, a segment per phase (report/terminal.py's TimelineBar, laid out by
        report/charts.py), where the findings have one; and whether the chain measured it (then it
        goes with the departed node's rows), rather than the walk timing its job's start on the side."""
        cold, node = cold_start_of(self.findings, [step["node"] for step in self.chain])
        return ([Text(""), TimelineBar(cold)] if cold is not None else []), node is not None

    def _detail(self) -> Group:
        """After the fix: what the node found (the report's sections), the series, the shares, the
        top stacks and the files for other viewers, then how it was measured."""
        parts: list[RenderableType] = []
        timeline, measured = self._timeline()
        if measured:
            parts += timeline
        parts += self._rows()
        parts += renderables(also_departing(self.findings))
        series = self._series()
        if series:
            parts += [Text(""), *series]
        parts += self._bars()
        parts += renderables(brief(top_stacks(self.findings), STACKS))
        if not measured:
            parts += timeline
        parts += renderables(artifact_sections(self.findings, level=3))
        provenance = [f"{step['node']}: {self.findings.evidence[step['node']]['provenance']}" for step in self.chain
                      if self.findings.evidence.get(step["node"], {}).get("provenance")]
        if provenance:
            parts += [Text(""), Text("How it was measured: " + "; ".join(provenance), style="dim italic")]
        if self.findings.exit:
            parts += [Text(""), Text(self.findings.exit_line(), style=STYLE[ERROR])]
        return Group(*parts)

    # -- live readings and the re-measure, routed here by the app from the walk ---------------------------

    @on(LiveUpdate)
    def live_update(self, event: LiveUpdate) -> None:
        self.live.update_readings(event.readings, event.output)

    @on(MeterSample)
    def meter_sample(self, event: MeterSample) -> None:
        self.live.update_meter(event.main_pct, event.children_pct, event.children, event.rss_mib)

    @on(RemeasureStatus)
    def remeasure_status(self, event: RemeasureStatus) -> None:
        self.remeasure_progress(event.text)

    @on(RemeasureDone)
    def remeasure_done(self, event: RemeasureDone) -> None:
        self.remeasure_finished(event.rows, event.note)

    def remeasure_progress(self, text: str) -> None:
        box = self.query_one("#dep-remeasure", Static)
        box.display = True
        box.update(Text.assemble(("Re-measuring… ", "bold yellow"), text))
        self.live.display = True
        self.query_one("#dep-scroll", VerticalScroll).scroll_home(animate=False)

    def remeasure_finished(self, rows: RemeasureRows, note: str) -> None:
        self.live.display = False
        box = self.query_one("#dep-remeasure", Static)
        box.display = True
        if not rows:
            box.update(Text.assemble((f"{GLYPH[ERROR]} Could not re-measure: ", f"bold {STYLE[ERROR]}"),
                                     note or "nothing measured"))
            return
        node_id, before, after = rows[0]
        if after.status == PASS:
            head = Text(f"{GLYPH[PASS]} Fixed: {node_id} now passes.", style=f"bold {STYLE[PASS]}")
        elif after.status == DEPART:
            head = Text(f"{GLYPH[DEPART]} Still departs at {node_id}: the fix is not in yet.", style=STYLE[DEPART])
        else:
            head = Text(f"{GLYPH[ERROR]} Could not re-measure {node_id}: {after.note}", style=f"bold {STYLE[ERROR]}")
        table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False)
        for name in ("node", "value", "before", "now", ""):
            table.add_column(name, no_wrap=True)
        for nid, old, new in rows:
            units = new.measurement.units if new.measurement is not None else {}
            for i, name in enumerate(new.measured or (old.measured if old else {})):
                was = format_value(old.measured.get(name), units.get(name, "")) if old else "n/a"
                now = format_value(new.measured.get(name), units.get(name, ""))
                table.add_row(nid if i == 0 else "", name, was, now,
                              Text(status_mark(new.status), style=STYLE.get(new.status, "")) if i == 0 else "")
        parts: list[RenderableType] = [head, table]
        if note:
            parts.append(Text(note, style="dim"))
        parts.append(Text(""))
        box.update(Group(*parts))

    # -- actions: the walk does them; the app routes the request there ------------------------------------

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_try_fix(self) -> None:
        panel = self.query_one("#dep-tryfix", TryFixPanel)
        if self.driver is None:
            self.notify("The walk is gone: nothing to relaunch.")
        elif panel.running:
            self.notify("The fix is being tried already.")
        else:
            panel.start(self.driver)

    def action_remeasure(self) -> None:
        self.post_message(RemeasureRequested())

    def action_export(self) -> None:
        self.post_message(ExportRequested())

    def action_numbers(self) -> None:
        box = self.query_one("#dep-numbers", Static)
        if self.numbers is None:
            self.notify("No other readings: the table above has them all.")
            return
        box.display = not box.display
        if box.display:
            self.query_one("#dep-scroll", VerticalScroll).scroll_to_widget(box, animate=False)
