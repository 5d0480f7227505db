"""The typed sections (report/section_types.py) as Rich renderables, for a terminal: the headless
summary and the TUI's departure page draw the same sections the documents do. Text is never read
as markup here: every string goes into a `Text`, so brackets and asterisks the job printed stay."""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table as RichTable
from rich.text import Text

from fieldguide.analysis.coldstart import ColdStart
from fieldguide.report.fixsteps import INDENT, parse_step
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
LONG_CODE = 24  # a code span this long (a path, a command) is never broken by a wrap


class SoftLine(Text):
    """Prose holding a path or a command: printed unwrapped (the terminal wraps it softly, so the
    path inside pastes whole); inside a widget it wraps like any text."""


class CodeLine(SoftLine):
    """A line to paste (a path, a command, a line of code): printed whole, never wrapped or cut by
    fieldguide; a terminal wraps it softly, so a copied line is the line (print_renderables).
    Drawn inside a widget (the TUI), it is one line cut with an ellipsis, never word-wrapped (a
    wrapped comment reads as a line of code of its own); the report has it whole."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("no_wrap", True)
        kwargs.setdefault("overflow", "ellipsis")
        super().__init__(*args, **kwargs)


class WideTable:
    """A table holding a long path or command: as a table where it fits the console, else as
    records (a line per cell, the code whole on its own line), since a column too narrow for it
    would fold the path mid-word. In a Group (the TUI) it is the table."""

    def __init__(self, table: RichTable, records: list[RenderableType]) -> None:
        self.table, self.records = table, records

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table

    def parts_for(self, console: Console) -> list[RenderableType]:
        natural = console.measure(self.table, options=console.options.update_width(10**6)).maximum
        return [self.table] if natural <= console.width else self.records


def print_renderables(console: Console, parts: list[RenderableType]) -> None:
    """Each part on its own: code lines with soft wrap, prose wrapped to the console's width."""
    for part in parts:
        for line in part.parts_for(console) if isinstance(part, WideTable) else [part]:
            console.print(line, soft_wrap=isinstance(line, SoftLine))


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
    text = Text.assemble(*((s.text, CODE_STYLE if s.style == "code" else s.style) for s in spans), style=style)
    if any(s.style == "code" and len(s.text) >= LONG_CODE for s in spans):
        return SoftLine.assemble(text)  # a wrap would break the path or command inside it
    return text


def fix_steps(steps: tuple[str, ...]) -> list[RenderableType]:
    """Numbered steps: prose wrapped, each line of code whole and indented under its step's text
    (a wrapped comment would be a line of code of its own, pasted)."""
    out: list[RenderableType] = []
    for number, step in enumerate(steps, 1):
        first = True
        for block in parse_step(step):
            if block.code:
                out += [CodeLine(INDENT + line, style=CODE_STYLE) for line in block.lines]
                continue
            prose = " ".join(line.strip() for line in block.lines if line.strip())
            if prose:
                lead = f"{number}. " if first else INDENT
                out.append(_inline_code(lead + prose))
                first = False
    return out


def _inline_code(text: str) -> Text:
    """A fix step's prose with its `code` spans styled (the backticks dropped)."""
    parts = text.split("`")
    spans = tuple(Span(part, "code" if i % 2 else "") for i, part in enumerate(parts) if part)
    return _spans(spans)


def _cell(cell: Cell) -> Text:
    style = status_style(cell.status) if cell.status else CODE_STYLE if cell.code else ""
    return Text(cell.text, style=style)


def _table_parts(section: Table) -> list[RenderableType]:
    """A table; one with a long path or command in it a WideTable (records where it does not fit)."""
    if not any(c.code and len(c.text) >= LONG_CODE for row in section.rows for c in row):
        return [_table(section)]
    return [WideTable(_table(section), _records(section))]


def _records(section: Table) -> list[RenderableType]:
    out: list[RenderableType] = []
    for row in section.rows:
        head, *rest = row
        out.append(Text(head.text, style="bold"))
        for name, cell in zip(section.columns[1:], rest, strict=False):
            if not cell.text:
                continue
            label = f"  {name.replace('_', ' ')}: " if name else "  "
            if cell.code:
                out.append(CodeLine.assemble((label, "dim"), (cell.text, CODE_STYLE)))
            else:
                out.append(Text.assemble((label, "dim"), _cell(cell)))
    return out


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
        return _table_parts(section)
    if isinstance(section, FixPage):
        return [*([Text.assemble(("Why: ", "bold"), section.why)] if section.why else []),
                Text("Fix:", style="bold"), *fix_steps(section.fix),
                Text.assemble(("Verify: ", "bold"), section.verify)]
    if isinstance(section, Timeline):
        return [Text(""), TimelineBar(section.cold)]
    if isinstance(section, Figure):
        return []  # a chart needs a format that draws: the HTML report has it
    if isinstance(section, Preformatted):
        return [CodeLine(line, style="dim") for line in section.lines]
    if isinstance(section, Bullets):
        return [Text(f"• {item}") for item in section.items]
    raise TypeError(f"no terminal rendering for {type(section).__name__}")


def renderables(sections: list[Section]) -> list[RenderableType]:
    return [part for section in sections for part in section_renderables(section)]
