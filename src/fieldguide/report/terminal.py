"""The typed sections (report/section_types.py) as Rich renderables, for a terminal: the headless
summary and the TUI's departure page draw the same sections the documents do. Text is never read
as markup here: every string goes into a `Text`, so brackets and asterisks the job printed stay."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markdown import Markdown
from rich.table import Table as RichTable
from rich.text import Text

from fieldguide.analysis.coldstart import ColdStart
from fieldguide.report.fixsteps import steps_markdown
from fieldguide.report.section_types import (
    Bullets,
    Cell,
    Facts,
    Figure,
    FixPage,
    Heading,
    Paragraph,
    Preformatted,
    Section,
    Span,
    Table,
    Timeline,
    Title,
    Verdict,
)
from fieldguide.report.timeline import timeline_segments, timeline_title
from fieldguide.report.vocabulary import STYLE, VERDICT_STYLE, status_style

CODE_STYLE = "cyan"


class TimelineBar:
    """The cold start as one bar of block characters, a segment per phase as wide as its seconds
    (laid out by report/timeline.py, coloured as the HTML report's timeline), under the time to
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


def _spans(spans: tuple[Span, ...], style: str = "") -> Text:
    return Text.assemble(*((s.text, CODE_STYLE if s.style == "code" else s.style) for s in spans), style=style)


def _cell(cell: Cell) -> Text:
    style = status_style(cell.status) if cell.status else CODE_STYLE if cell.code else ""
    return Text(cell.text, style=style)


def _table(section: Table) -> RichTable:
    table = RichTable(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for name in section.columns:
        table.add_column(name.replace("_", " "), overflow="fold")
    for row in section.rows:
        table.add_row(*map(_cell, row))
    return table


def section_renderables(section: Section) -> list[RenderableType]:
    """One section for a terminal."""
    if isinstance(section, Title):
        return [Text(section.text, style="bold")]
    if isinstance(section, Facts):
        return [Text.assemble((f"{label}: ", "bold"), _spans(spans)) for label, spans in section.items]
    if isinstance(section, Verdict):
        return [Text(section.text, style=f"bold {VERDICT_STYLE.get(section.verdict, '')}".strip())]
    if isinstance(section, Heading):
        return [Text(""), Text(section.text, style="bold" if section.level > 2 else "bold underline")]
    if isinstance(section, Paragraph):
        style = "yellow" if section.kind == "note" else STYLE["error"] if section.kind == "error" else ""
        return [_spans(section.spans, style)]
    if isinstance(section, Table):
        return [_table(section)]
    if isinstance(section, FixPage):
        return [*([Text.assemble(("Why: ", "bold"), section.why)] if section.why else []),
                Text("Fix:", style="bold"), Markdown("\n".join(steps_markdown(list(section.fix)))),
                Text.assemble(("Verify: ", "bold"), section.verify)]
    if isinstance(section, Timeline):
        return [Text(""), TimelineBar(section.cold)]
    if isinstance(section, Figure):
        return []  # a chart needs a format that draws: the HTML report has it
    if isinstance(section, Preformatted):
        return [Text(line, style="dim") for line in section.lines]
    if isinstance(section, Bullets):
        return [Text(f"• {item}") for item in section.items]
    raise TypeError(f"no terminal rendering for {type(section).__name__}")


def renderables(sections: list[Section]) -> list[RenderableType]:
    return [part for section in sections for part in section_renderables(section)]
