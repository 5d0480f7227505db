"""What the terminal summary prints can be copied off the node: a path, a command or a line of the
fix is never broken by fieldguide, and off a terminal nothing is padded or hard-wrapped."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from fieldguide.report import load_report
from fieldguide.report.consoles import OFF_TERMINAL_WIDTH, Unpadded, console
from fieldguide.report.evidence_sections import torch_trace
from fieldguide.report.section_types import Preformatted
from fieldguide.report.summary import summary_renderables
from fieldguide.report.terminal import print_renderables

FIXTURE = Path(__file__).parents[1] / "tui" / "fixtures" / "watch_departure.json"
LONG = "/tmp/fieldguide-artifacts-9x8y7z6w/stacks-123456-1796644960.speedscope.json"


def findings_with_artifacts():
    findings = load_report(FIXTURE)
    findings.artifacts = [{"kind": "speedscope", "path": LONG, "open_with": "https://www.speedscope.app"},
                          {"kind": "torch_trace", "path": "/r/report-torch-trace/rank_0.log", "open_with": "tlparse",
                           "command": "tlparse /r/report-torch-trace/rank_0.log -o /r/report-torch-trace/rank_0-tlparse --overwrite"}]
    return findings


def printed(width: int) -> list[str]:
    out = io.StringIO()
    print_renderables(Console(file=out, width=width, color_system=None, force_terminal=True),
                      summary_renderables(findings_with_artifacts()))
    return out.getvalue().splitlines()


def test_at_80_columns_every_path_command_and_fix_line_is_on_one_line() -> None:
    lines = printed(80)
    assert any(LONG in line for line in lines), "the artifact's path, whole"
    command = "tlparse /r/report-torch-trace/rank_0.log -o /r/report-torch-trace/rank_0-tlparse --overwrite"
    assert any(line.endswith(command) for line in lines)
    assert not [line for line in lines if line.startswith(("│", "╭", "╰"))], "no frame around what is copied"


def test_off_a_terminal_nothing_is_padded_or_wrapped(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    c = console()
    assert c.width == OFF_TERMINAL_WIDTH and not c.is_terminal
    print_renderables(c, summary_renderables(findings_with_artifacts()))
    c.file.flush()
    lines = out.getvalue().splitlines()
    assert lines and not [line for line in lines if line != line.rstrip()]
    verdict_paragraphs = [line for line in lines if len(line) > 80]
    assert verdict_paragraphs, "a long sentence stays one line for grep"


def test_unpadded_strips_only_trailing_spaces_and_keeps_a_partial_line() -> None:
    out = io.StringIO()
    stream = Unpadded(out)
    stream.write("a  b   \nc")
    assert out.getvalue() == "a  b\n"
    stream.write("d  \n")
    stream.write("tail  ")
    stream.flush()
    assert out.getvalue() == "a  b\ncd\ntail"


def test_the_compile_trace_section_gives_tlparse_a_file_not_the_folder() -> None:
    findings = findings_with_artifacts()
    findings.evidence = {"compile.graph": {"torch_trace": "/r/report-torch-trace"}}
    sections = torch_trace(findings)
    commands = [s for s in sections if isinstance(s, Preformatted)]
    assert commands and commands[0].lines[0].startswith("tlparse /r/report-torch-trace/rank_0.log -o ")
    assert "tlparse /r/report-torch-trace\n" not in "\n".join(commands[0].lines) + "\n"


def test_the_top_ops_an_overhead_verdict_rests_on_are_shown_in_every_format() -> None:
    """host.overhead is decided from an op profile: its top operators (calls, total, per call,
    share of the profiled steps) are in the terminal summary, Markdown and HTML alike."""
    from fieldguide.report.render import render

    findings = findings_with_artifacts()
    findings.evidence = {**findings.evidence, "host.overhead": {
        "probe": "torch.ops", "values": {"profiled_steps": 5, "profiled_step_ms": 16.6},
        "top_ops": [{"op": "aten::matmul", "total_us": 15400.0, "count": 3000},
                    {"op": "aten::add_", "total_us": 2100.0, "count": 1500}]}}
    out = io.StringIO()
    print_renderables(Console(file=out, width=80, color_system=None), summary_renderables(findings))
    terminal = out.getvalue()
    for text in (terminal, render(findings, "md"), render(findings, "html")):
        assert "aten::matmul" in text and "3,000" in text and "15.4 ms" in text and "5.1 µs" in text, text[-3000:]
        assert "19%" in text  # 15.4 ms of 5 x 16.6 ms
