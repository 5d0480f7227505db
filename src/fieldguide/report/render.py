"""Render Findings in a report format (report/formats/: JSON, Markdown, HTML) and write them.
The document formats render the same typed sections (report/sections.py)."""

from __future__ import annotations

from pathlib import Path

from fieldguide.report.findings import Findings
from fieldguide.report.formats import FORMATS, format_module, suffixes
from fieldguide.safewrite import write_text

SUFFIXES = suffixes()  # report formats by file suffix


def format_for(path: Path, explicit: str | None) -> str:
    if explicit:
        return explicit
    return SUFFIXES.get(path.suffix.lower(), "json")


def render(findings: Findings, fmt: str) -> str:
    return str(format_module(fmt).render(findings))


def write_report(findings: Findings, path: Path, fmt: str | None = None) -> Path:
    path = Path(path)
    text = render(findings, format_for(path, fmt))
    return write_text(path, text)  # never half a report, never through a planted link


def to_markdown(findings: Findings) -> str:
    return render(findings, "md")


def to_html(findings: Findings) -> str:
    return render(findings, "html")


__all__ = ["FORMATS", "SUFFIXES", "format_for", "render", "to_html", "to_markdown", "write_report"]
