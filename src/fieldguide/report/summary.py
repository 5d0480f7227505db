"""The short rich summary printed on stdout after a headless walk."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fieldguide.measurement import format_value
from fieldguide.report.findings import Findings
from fieldguide.report.render import STATUS_MARK, VERDICT_TEXT

STATUS_STYLE = {"pass": "green", "depart": "bold red", "skip": "dim", "error": "yellow"}


def path_table(findings: Findings) -> Table:
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("node")
    table.add_column("status")
    table.add_column("measured", overflow="fold")
    for step in findings.path:
        measured = ", ".join(f"{n}={format_value(v, findings.units.get(n, ''))}" for n, v in step["measured"].items())
        table.add_row(step["node"], Text(STATUS_MARK[step["status"]], style=STATUS_STYLE[step["status"]]),
                      measured or Text(step["note"][:120], style="dim"))
    return table


def summary_renderable(findings: Findings) -> RenderableType:
    parts: list[RenderableType] = [path_table(findings)]
    dep = findings.first_departure
    if dep:
        parts += [Text(""), Text(f"{dep['title']}  [{dep['cause']}]", style="bold red"), Text(dep["summary"]),
                  Text(f"expected: {dep['expected']}", style="dim"), Text(""), Text("Fix:", style="bold")]
        parts += [Markdown(f"{i}. {step}") for i, step in enumerate(dep["fix"], 1)]
        parts += [Text("Verify: ", style="bold").append(Text(dep["verify"], style="not bold"))]
    elif findings.conclusion:
        parts += [Text(""), Text(f"Healthy: {findings.conclusion}", style="bold green"), Text(findings.conclusion_text)]
    if findings.note:
        parts += [Text(""), Text(findings.note, style="yellow")]
    title = f"fieldguide · {findings.playbook} · {VERDICT_TEXT[findings.verdict]}"
    style = {"departure": "red", "clean": "green", "inconclusive": "yellow"}[findings.verdict]
    return Panel(Group(*parts), title=title, border_style=style, title_align="left")
