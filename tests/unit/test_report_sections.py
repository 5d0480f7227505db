"""The report's sections are rendered by every document format, and a format is one module in the
registry (report/formats/)."""

from __future__ import annotations

import typing

import pytest

from fieldguide.report import section_types as s
from fieldguide.report.formats import FORMATS, format_module, suffixes
from fieldguide.report.render import format_for, render

ONE_OF_EACH: list[s.Section] = [
    s.Title("fieldguide report: <Slow> *training*"),
    s.Facts((("Target", (s.Span("launch pid 1 — "), s.code("python train.py"))),)),
    s.Verdict("departure", "Departure found"),
    s.Heading(2, "Path"),
    s.Paragraph((s.Span("waits in "), s.code("DataLoader.__next__"), s.Span(" 93% of a step"))),
    s.Paragraph((s.Span("interrupted"),), kind="note"),
    s.Paragraph((s.Span("it died", "bold"),), kind="error"),
    s.Table(("node", "status"), ((s.Cell("input.data-wait"), s.Cell("✗ depart", status="depart")),)),
    s.FixPage("Why.", ("Set `num_workers=4`.",), "Run it again."),
    s.Figure("a chart", "<svg></svg>"),
    s.Preformatted(("```", "<script>alert(1)</script>")),
    s.Bullets(("rank 1 | host",)),
    s.Timeline({"phases": [{"phase": "imports", "title": "Imports [torch]", "start_s": 0.0, "seconds": 2.0}],
                "total_s": 2.0, "steady": True, "steady_step": 3}),
]


def test_every_kind_of_section_is_in_the_list_above() -> None:
    assert {type(x) for x in ONE_OF_EACH} == set(typing.get_args(s.Section))


@pytest.mark.parametrize("name", [n for n in FORMATS if hasattr(format_module(n), "document")])
def test_every_document_format_renders_every_section_escaped_once(name: str) -> None:
    text = format_module(name).document(ONE_OF_EACH)
    assert "DataLoader.__next__" in text  # code is shown as it is, not as markup
    assert "rank 1" in text and "Run it again" in text and "num_workers=4" in text


def test_a_format_is_a_module_with_a_name_its_suffixes_and_render() -> None:
    for name in FORMATS:
        module = format_module(name)
        assert module.NAME == name and module.SUFFIXES and callable(module.render)
    assert suffixes() == {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        format_module("pdf")
    with pytest.raises(ValueError):
        render(None, "pdf")  # type: ignore[arg-type]
    from pathlib import Path

    assert format_for(Path("r.HTM"), None) == "html" and format_for(Path("r"), None) == "json"


def test_markdown_shows_a_code_span_and_html_escapes_the_title() -> None:
    md = format_module("md").document(ONE_OF_EACH)
    assert "`DataLoader.__next__`" in md and "\\*training\\*" in md
    assert "<svg" not in md  # a figure needs a format that draws
    assert "````\n```\n<script>alert(1)</script>\n````" in md  # output in a fence longer than any it holds
    page = format_module("html").document(ONE_OF_EACH)
    assert "<title>fieldguide report: &lt;Slow&gt; *training*</title>" in page
    assert "<td class='depart k'>✗ depart</td>" in page and "<figure><svg></svg>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_terminal_draws_every_section_and_reads_no_markup() -> None:
    from rich.console import Console, Group

    from fieldguide.report.terminal import renderables

    console = Console(record=True, width=80, color_system=None)
    console.print(Group(*renderables(ONE_OF_EACH)))
    text = console.export_text()
    assert "DataLoader.__next__" in text and "<Slow> *training*" in text  # as it is, not as markup
    assert "Imports [torch]" in text and "num_workers=4" in text and "Run it again" in text
    assert all(len(line) <= 80 for line in text.splitlines())
