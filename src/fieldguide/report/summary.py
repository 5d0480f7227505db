"""The short rich summary printed after a headless walk (`summary_panel`): the summary's sections
(report/sections.py) drawn for a terminal (report/terminal.py), the same sections, vocabulary and
fix-step renderer as the Markdown/HTML reports and the TUI."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.text import Text

from fieldguide.report.findings import Findings
from fieldguide.report.sections import experiment_sections, summary_sections
from fieldguide.report.terminal import renderables
from fieldguide.report.vocabulary import VERDICT_STYLE

FOUND_ROWS = 8  # rows of a table a terminal shows; the report has them all


def panel_title(findings: Findings) -> str:
    """The panel's title: short, so that Rich never cuts it on an 80-column terminal (the
    verdict's sentence is the panel's first line)."""
    return f"fieldguide · {findings.playbook} · {findings.verdict}"


def experiment_renderables(experiments: list[dict[str, Any]]) -> list[RenderableType]:
    """Each fix tried: its title, the table of arms, and its verdict (or why it was not tried)."""
    return renderables(experiment_sections(experiments))


def summary_panel(findings: Findings) -> Panel:
    """The summary of the findings as every report shows them: secrets redacted (a note or the
    target's exception may quote the job's arguments or its output)."""
    parts = renderables(summary_sections(findings, max_rows=FOUND_ROWS))
    return Panel(Group(*parts), title=panel_title(findings), border_style=VERDICT_STYLE.get(findings.verdict, ""),
                 title_align="left")


def summary_renderables(findings: Findings) -> list[RenderableType]:
    """The summary as lines to print, without a frame: a path, a command or the fix's code copied
    from the terminal is the text alone (print with report/terminal.py's print_renderables)."""
    title = Text(panel_title(findings), style=f"bold {VERDICT_STYLE.get(findings.verdict, '')}".strip())
    return [title, *renderables(summary_sections(findings, max_rows=FOUND_ROWS))]
