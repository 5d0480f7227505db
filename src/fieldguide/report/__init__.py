"""Findings and their renderers: JSON, Markdown, HTML, and a short rich summary. No Textual.

The names below load when first used: a view that needs only `report.vocabulary` (the TUI's
first screen) does not pay for the findings, the formats and the charts. `render` the function
is `fieldguide.report.render.render`: here `render` is that submodule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fieldguide.report.findings import Findings, findings_from_walk, load_report
    from fieldguide.report.render import FORMATS, to_html, to_markdown, write_report

__all__ = ["FORMATS", "Findings", "findings_from_walk", "load_report", "to_html", "to_markdown", "write_report"]

_WHERE = {"Findings": "findings", "findings_from_walk": "findings", "load_report": "findings",
          "FORMATS": "render", "to_html": "render", "to_markdown": "render", "write_report": "render"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
