"""The Markdown report: the sections (report/sections.py) as Markdown. Every string goes through
report/mdtext.py, so whatever the job printed or a saved report holds is shown, never read as markup."""

from __future__ import annotations

from fieldguide.report.findings import Findings
from fieldguide.report.fixsteps import page_markdown
from fieldguide.report.mdtext import md_cell, md_code, md_fence, md_text
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
from fieldguide.report.sections import report_sections
from fieldguide.report.timeline import phases_table

NAME = "md"
SUFFIXES = (".md", ".markdown")


def _plain(text: str) -> str:
    """md_text, keeping the spaces that join this span to its neighbours."""
    core = md_text(text)
    return (" " if text[:1].isspace() and core else "") + core + (" " if text[-1:].isspace() else "")


def _spans(spans: tuple[Span, ...]) -> str:
    return "".join(md_code(s.text) if s.style == "code" else f"**{md_text(s.text)}**" if s.style == "bold"
                   else _plain(s.text) for s in spans)


def _cell(cell: Cell) -> str:
    text = md_code(cell.text, cell=True) if cell.code else md_cell(cell.text)
    # A link's target in <...> may hold spaces; `<`, `>` and `|` (a table) are percent-escaped.
    target = cell.link.replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"[{text}](<{target}>)" if cell.link else text


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def section_lines(section: Section) -> list[str]:
    if isinstance(section, Title):
        return [f"# {md_text(section.text)}", ""]
    if isinstance(section, Facts):
        return [f"- **{label}**: {_spans(spans)}" for label, spans in section.items] + [""]
    if isinstance(section, Verdict):
        return [f"## Verdict: {md_text(section.text)}", ""]
    if isinstance(section, Heading):
        return [f"{'#' * section.level} {md_text(section.text)}", ""]
    if isinstance(section, Paragraph):
        text = _spans(section.spans)
        return [f"> {text}" if section.kind == "note" else text, ""]
    if isinstance(section, Table):
        return [_row(*map(md_cell, section.columns)), "|" + "---|" * len(section.columns),
                *(_row(*map(_cell, row)) for row in section.rows), ""]
    if isinstance(section, FixPage):
        return [*page_markdown(section.why, list(section.fix), section.verify, level=3).splitlines(), ""]
    if isinstance(section, Preformatted):
        return [*md_fence(list(section.lines)), ""]
    if isinstance(section, Bullets):
        return [f"- {md_text(item)}" for item in section.items] + [""]
    if isinstance(section, Timeline):
        return section_lines(phases_table(section))
    if isinstance(section, Figure):
        return []  # a chart needs a format that draws: the HTML report has it
    raise TypeError(f"no Markdown for {type(section).__name__}")


def document(sections: list[Section]) -> str:
    lines = [line for section in sections for line in section_lines(section)]
    return "\n".join(lines).rstrip("\n") + "\n"


def render(findings: Findings) -> str:
    return document(report_sections(findings))
