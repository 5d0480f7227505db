"""Render Findings in a report format (report/formats/: JSON, Markdown, HTML) and write them.
The document formats render the same typed sections (report/sections.py)."""

from __future__ import annotations

from pathlib import Path

from fieldguide.report.findings import Findings
from fieldguide.report.formats import FORMATS, format_module, suffixes
from fieldguide.safewrite import write_text

SUFFIXES = suffixes()  # report formats by file suffix


def format_for(path: Path, explicit: str | None) -> str:
    """The format to write `path` in: `explicit`, else its suffix's; JSON for a path with no suffix
    (`-`, /dev/stdout). ValueError for a suffix that names no format (`x.txt`), which would
    otherwise get JSON it does not say it holds."""
    if explicit:
        return explicit
    if not path.suffix:
        return "json"
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"the suffix {path.suffix} names no report format; use "
                         f"{', '.join(sorted(SUFFIXES))}, or --format {'|'.join(FORMATS)}")
    return SUFFIXES[path.suffix.lower()]


# Report paths that mean this process's standard output.
STDOUT_PATHS = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def is_stdout(path: Path) -> bool:
    return str(path) in STDOUT_PATHS


def render(findings: Findings, fmt: str) -> str:
    return str(format_module(fmt).render(findings))


def write_report(findings: Findings, path: Path, fmt: str | None = None) -> Path:
    """Write the report, with the walk's files for viewers copied beside it (report/artifacts.py)."""
    from fieldguide.report.artifacts import place

    path = Path(path)
    text = render(place(findings, path), format_for(path, fmt))
    return write_text(path, text)  # never half a report, never through a planted link


def to_markdown(findings: Findings) -> str:
    return render(findings, "md")


def to_html(findings: Findings) -> str:
    return render(findings, "html")


__all__ = ["FORMATS", "STDOUT_PATHS", "SUFFIXES", "format_for", "is_stdout", "render", "to_html", "to_markdown", "write_report"]
