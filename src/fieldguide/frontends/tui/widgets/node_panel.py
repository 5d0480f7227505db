"""The right-hand side of the walk: the node under the cursor (or measuring): its question,
the probe's live readings, then measured vs expected, and why the node matters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from fieldguide.analysis.coldstart import ColdStart
from fieldguide.frontends.tui.model import measured_vs_expected
from fieldguide.frontends.tui.widgets.live import LiveReadings
from fieldguide.report.vocabulary import (
    DEPART,
    ERROR,
    GLYPH,
    HELD_GLYPH,
    HELD_STYLE,
    PASS,
    STYLE,
    WAITING,
    WORD,
)

if TYPE_CHECKING:
    from fieldguide.playbook import Cause, Node
    from fieldguide.walk.engine import NodeResult


class NodePanel(VerticalScroll):
    DEFAULT_CSS = """
    NodePanel { padding: 0 1; }
    NodePanel > Static { height: auto; }
    NodePanel #np-question { margin-bottom: 1; }
    NodePanel #np-live { margin-bottom: 1; }
    NodePanel #np-result { margin-bottom: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="np-title")
        yield Static(id="np-question")
        yield LiveReadings(id="np-live")
        yield Static(id="np-result")
        yield Static(id="np-why")

    @property
    def live(self) -> LiveReadings:
        return self.query_one("#np-live", LiveReadings)

    def _set(self, title: Text | str, question: Text | str = "", result: object = "", why: Text | str = "",
             *, live: bool = False) -> None:
        self.query_one("#np-title", Static).update(title)
        self.query_one("#np-question", Static).update(question)
        self.query_one("#np-result", Static).update(result)  # type: ignore[arg-type]
        self.query_one("#np-why", Static).update(why)
        self.live.display = live

    def show_message(self, title: str, text: str, *, live: bool = False) -> None:
        self._set(Text(title, style="bold"), Text(text), live=live)

    def show_node(self, node: Node, state: str, result: NodeResult | None, *, measuring: bool,
                  rerun: bool = False) -> None:
        title = Text.assemble((GLYPH[state] + " ", STYLE[state]), (node.id, "bold"),
                              ("  " + WORD[state], STYLE[state] if state != WAITING else "dim"))
        if result is not None and not measuring:
            extra = f"  {result.probe or 'no probe'} · {result.seconds:.1f} s" + (" · re-run" if rerun else "")
            title.append(extra, style="dim")
        body: list[RenderableType] = []
        if result is not None and not measuring:
            rows = measured_vs_expected(node, result)
            if rows:
                table = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, expand=False)
                table.add_column("value", style="bold", no_wrap=True, overflow="ellipsis")
                table.add_column("measured", no_wrap=True)
                table.add_column("expected", no_wrap=True)
                table.add_column("", no_wrap=True)
                for row in rows:
                    table.add_row(row.name, row.measured, row.expected,
                                  Text(HELD_GLYPH[row.held], style=HELD_STYLE[row.held]))
                body.append(table)
            elif result.expected:
                body.append(Text(f"expected: {result.expected}", style="dim"))
            if result.note:
                body.append(Text(result.note, style="italic dim" if result.status in (PASS, DEPART) else STYLE[ERROR]))
        elif not measuring:
            option = node.measure[0] if node.measure else None
            if option is not None:
                body.append(Text(f"expects {option.expect.describe()}  (probe {option.probe})", style="dim"))
        why = Text.assemble(("Why: ", "bold dim"), (node.why.strip(), "dim"))
        self._set(title, Text(node.question, style="bold"), Group(*body) if body else "", why, live=measuring)

    def show_cause(self, cause: Cause, reached: bool, summary: str = "") -> None:
        title = Text.assemble(("◆ " if reached else "◇ ", "bold red" if reached else "dim"), (cause.id, "bold"),
                              ("  the walk ended here" if reached else "  a cause this playbook can name", "dim"))
        text = Text(summary, style="bold") if summary else Text("")
        why = Text.assemble(("Why it costs: ", "bold dim"), (cause.why.strip(), "dim"))
        self._set(title, Text(cause.title, style="bold"), text, why)

    def show_leaf(self, leaf_id: str, meaning: str, reached: bool, cold_start: ColdStart | None = None) -> None:
        """A healthy leaf; the one the walk reached shows the launched job's start as one bar
        (a clean slow-start walk's numbers: what each phase took)."""
        from fieldguide.report.terminal import TimelineBar
        from fieldguide.report.timeline import timed_phases

        title = Text.assemble(("● " if reached else "○ ", "bold green" if reached else "dim"), (leaf_id, "bold"),
                              ("  the walk ended here: healthy" if reached else "  a healthy leaf", "dim"))
        start: RenderableType = Text("")
        if reached and cold_start is not None and timed_phases(cold_start.get("phases")):
            start = Group(Text("The job's start", style="bold"), TimelineBar(cold_start))
        self._set(title, Text(meaning.strip()), start)
