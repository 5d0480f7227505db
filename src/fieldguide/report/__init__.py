"""Findings and their renderers: JSON, Markdown, HTML, and a short rich summary. No Textual."""

from fieldguide.report.findings import Findings, findings_from_walk, load_report
from fieldguide.report.render import FORMATS, render, to_html, to_markdown, write_report

__all__ = ["FORMATS", "Findings", "findings_from_walk", "load_report", "render", "to_html", "to_markdown",
           "write_report"]
