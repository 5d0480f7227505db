"""The short rich summary printed on stdout after a headless walk (`summary_panel`). The status words and the fix steps come from
the same vocabulary and renderer as the Markdown/HTML reports and the TUI."""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fieldguide.coldstart import ColdStart
from fieldguide.measurement import format_value
from fieldguide.probes.evidence import TORCH_TRACE
from fieldguide.report.findings import Findings, experiment_rows
from fieldguide.report.fixsteps import steps_markdown
from fieldguide.report.timeline import cold_start_of, timeline_segments, timeline_title
from fieldguide.report.vocabulary import (
    ACTION_TEXT,
    STYLE,
    VERDICT_STYLE,
    status_mark,
    status_style,
    verdict_text,
)

NOTE_CHARS = 120


def _steps_table(findings: Findings, steps: list[dict[str, object]], *, action: bool = False) -> Table:
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    if action:
        table.add_column("did")
    table.add_column("node")
    table.add_column("status")
    table.add_column("measured", overflow="fold")
    for step in steps:
        status = str(step["status"])
        measured_values = step.get("measured") or {}
        assert isinstance(measured_values, dict)
        measured = ", ".join(f"{n}={v}" for n, v in findings.formatted(measured_values))
        row: list[RenderableType] = [str(step["node"]), Text(status_mark(status), style=status_style(status)),
                                     measured or Text(str(step.get("note") or "")[:NOTE_CHARS], style="dim")]
        if action:
            row.insert(0, ACTION_TEXT.get(str(step["action"]), str(step["action"])))
        table.add_row(*row)
    return table


def path_table(findings: Findings) -> Table:
    return _steps_table(findings, findings.path)


def panel_title(findings: Findings) -> str:
    """The panel's title: short, so that Rich never cuts it on an 80-column terminal (the
    verdict's sentence is the panel's first line)."""
    return f"fieldguide · {findings.playbook} · {findings.verdict}"


FOUND_ROWS = 8
EXPERIMENT_COLUMNS = ("arm", "step ms (quartiles)", "steps", "vs as launched (rounds)", "peak MB", "applied")


def found_table(rows: list[dict[str, Any]], units: dict[str, str]) -> Table:
    """What the departed node found, row by row (graph breaks with their lines, recompiles)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in columns:
        table.add_column(name.replace("_", " "), overflow="fold")
    for row in rows[:FOUND_ROWS]:
        table.add_row(*(format_value(row.get(name), units.get(name, "")) for name in columns))
    return table


class Timeline:
    """The cold start as one bar of block characters, a segment per phase as wide as its seconds
    (laid out by report/charts.py, coloured as the HTML report's timeline), under the time to
    steady steps, with a legend of each phase's title and seconds; as wide as it is given."""

    GAP = "  "

    def __init__(self, cold: ColdStart, most: int = 100) -> None:
        self.cold, self.most = cold, most

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(min(options.max_width, self.most), 8)
        segments = timeline_segments(self.cold.get("phases"), width)
        yield Text(timeline_title(self.cold), style="bold")
        yield Text.assemble(*((s.fill * s.cells, s.colour) for s in segments), no_wrap=True, overflow="crop")
        line = Text()
        for s in segments:  # the legend, entry after entry, a line as full as it goes
            entry = Text.assemble((s.fill, s.colour), " ", s.words)
            if line and line.cell_len + len(self.GAP) + entry.cell_len > width:
                yield line
                line = Text()
            if line:
                line.append(self.GAP)
            entry.truncate(width - line.cell_len, overflow="ellipsis")
            line.append_text(entry)
        if line:
            yield line


def cold_start_renderables(findings: Findings) -> list[RenderableType]:
    """The cold start's bar where a node of the walk timed the start (its evidence holds one)."""
    cold, node = cold_start_of(findings, [str(step["node"]) for step in findings.path])
    return [Text(""), Timeline(cold)] if cold is not None and node is not None else []


def experiment_renderables(experiments: list[dict[str, Any]], gap: bool = False) -> list[RenderableType]:
    """Each fix tried: its title, the table of arms, and its verdict (or why it was not tried)."""
    parts: list[RenderableType] = []
    for title, arm_rows, said in experiment_rows(experiments):
        parts += [Text(""), Text(title, style="bold")] if gap else [Text(title, style="bold")]
        if arm_rows:
            table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
            for name in EXPERIMENT_COLUMNS:
                table.add_column(name, overflow="fold")
            for row in arm_rows:
                table.add_row(*row)
            parts.append(table)
        parts.append(Text(said))
    return parts


def summary_panel(findings: Findings) -> Panel:
    """The summary of the findings as every report shows them: secrets redacted (a note or the
    target's exception may quote the job's arguments or its output)."""
    findings = findings.redacted()
    verdict = Text(verdict_text(findings.verdict), style=f"bold {VERDICT_STYLE.get(findings.verdict, '')}".strip())
    parts: list[RenderableType] = [verdict, Text(""), path_table(findings)]
    dep = findings.first_departure
    if dep:
        parts += [Text(""), Text(f"{dep['title']}  [{dep['cause']}]", style=STYLE["depart"]), Text(dep["summary"]),
                  Text(f"expected: {dep['expected']}", style="dim"), Text(""), Text("Fix:", style="bold"),
                  Markdown("\n".join(steps_markdown(dep["fix"])))]
        parts += [Text("Verify: ", style="bold").append(Text(dep["verify"], style="not bold"))]
    elif findings.conclusion:
        parts += [Text(""), Text(f"Healthy: {findings.conclusion}", style="bold green"), Text(findings.conclusion_text)]
    parts += cold_start_renderables(findings)
    rows = findings.found_rows()
    if rows:
        parts += [Text(""), found_table(rows, findings.units)]
    trace = findings.first_of(TORCH_TRACE)
    if trace:
        parts += [Text(f"compile trace: tlparse {trace}  (pip install tlparse)", style="dim")]
    parts += experiment_renderables(findings.experiments, gap=True)
    if findings.exit:
        parts += [Text(""), Text(findings.exit_line(), style=STYLE["error"])]
    if findings.note:
        parts += [Text(""), Text(findings.note, style="yellow")]
    if findings.reruns:
        parts += [Text(""), Text("Measured again in the TUI:", style="bold"),
                  _steps_table(findings, findings.reruns, action=True)]
    return Panel(Group(*parts), title=panel_title(findings), border_style=VERDICT_STYLE.get(findings.verdict, ""),
                 title_align="left")

