"""The HTML report: the sections (report/sections.py) as one self-contained page (inline CSS and
SVG, no script, nothing fetched). Every string is escaped here, once."""

from __future__ import annotations

from html import escape

from fieldguide.report.findings import Findings
from fieldguide.report.fixsteps import page_html
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

NAME = "html"
SUFFIXES = (".html", ".htm")

CSS = """body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
.table{overflow-x:auto;margin:1em 0}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
td{overflow-wrap:break-word}td.k,th{white-space:nowrap}td code{white-space:pre-wrap;overflow-wrap:anywhere}
code,pre{font-family:ui-monospace,monospace;background:#f4f4f4}pre{padding:8px;overflow-x:auto}
.pass{color:#1a7f37}.depart{color:#cf222e;font-weight:bold}.skip{color:#777}.error{color:#9a6700}
.verdict{padding:8px 12px;border-left:4px solid #cf222e;background:#fff5f5}.clean{border-color:#1a7f37;background:#f3fff5}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#57606a;font-size:90%}"""


def _spans(spans: tuple[Span, ...]) -> str:
    return "".join(f"<code>{escape(s.text)}</code>" if s.style == "code" else f"<b>{escape(s.text)}</b>"
                   if s.style == "bold" else escape(s.text) for s in spans)


KEEP_WHOLE = 24  # a cell this short (an id, a number, a status) never breaks: the browser gives it its width


def _cell(cell: Cell) -> str:
    text = f"<code>{escape(cell.text)}</code>" if cell.code else escape(cell.text)
    if cell.link:
        text = f"<a href='{escape(cell.link)}'>{text}</a>"
    classes = " ".join(c for c in (cell.status, "k" if len(cell.text) <= KEEP_WHOLE else "") if c)
    return f"<td class='{escape(classes)}'>{text}</td>" if classes else f"<td>{text}</td>"


def section_html(section: Section) -> str:
    if isinstance(section, Title):
        return f"<h1>{escape(section.text)}</h1>"
    if isinstance(section, Facts):
        return "<ul>" + "".join(f"<li><b>{escape(label)}</b>: {_spans(spans)}</li>" for label, spans in section.items) \
            + "</ul>"
    if isinstance(section, Verdict):
        return f"<div class='verdict {escape(section.verdict)}'><b>{escape(section.text)}</b></div>"
    if isinstance(section, Heading):
        return f"<h{section.level}>{escape(section.text)}</h{section.level}>"
    if isinstance(section, Paragraph):
        text = _spans(section.spans)
        return f"<blockquote>{text}</blockquote>" if section.kind == "note" else \
            f"<p class='error'>{text}</p>" if section.kind == "error" else f"<p>{text}</p>"
    if isinstance(section, Table):
        head = "<tr>" + "".join(f"<th>{escape(c)}</th>" for c in section.columns) + "</tr>"
        # A table wider than the page scrolls sideways in its own box; no cell is squeezed to a letter a line.
        return "<div class='table'><table>" + head + "".join("<tr>" + "".join(map(_cell, row)) + "</tr>"
                                                            for row in section.rows) + "</table></div>"
    if isinstance(section, FixPage):
        return page_html(section.why, list(section.fix), section.verify)
    if isinstance(section, Timeline):
        return section_html(phases_table(section))
    if isinstance(section, Figure):
        return f"<figure>{section.svg}<figcaption>{escape(section.caption)}</figcaption></figure>"
    if isinstance(section, Preformatted):
        return "<pre>" + escape("\n".join(section.lines)) + "</pre>"
    if isinstance(section, Bullets):
        return "<ul>" + "".join(f"<li>{escape(item)}</li>" for item in section.items) + "</ul>"
    raise TypeError(f"no HTML for {type(section).__name__}")


def render(findings: Findings) -> str:
    return document(report_sections(findings))


def document(sections: list[Section]) -> str:
    title = next((s.text for s in sections if isinstance(s, Title)), "fieldguide report")
    body = "\n".join(section_html(s) for s in sections)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n")
