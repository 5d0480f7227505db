"""Every fix a cause's page prints is code a user pastes: each ```python block of every bundled
cause parses as Python, and the terminal prints each of its lines whole (a comment wrapped onto
a line of its own, pasted, is a SyntaxError or a bare word)."""

from __future__ import annotations

import ast
import io
import textwrap

import pytest
from rich.console import Console

from fieldguide.playbook import load_causes, playbook_dirs
from fieldguide.report.fixsteps import parse_step
from fieldguide.report.section_types import FixPage
from fieldguide.report.terminal import CodeLine, print_renderables, section_renderables

CAUSES = load_causes(playbook_dirs()[-1])
PYTHON_BLOCKS = [(cid, i, block) for cid, cause in sorted(CAUSES.items()) for i, step in enumerate(cause.fix, 1)
                 for block in parse_step(step) if block.code and block.lang in ("python", "py")]


def test_the_causes_have_python_fixes_to_check() -> None:
    assert len(PYTHON_BLOCKS) >= 10


@pytest.mark.parametrize(("cause", "step", "block"), PYTHON_BLOCKS,
                         ids=[f"{c}-{s}-{n}" for n, (c, s, _) in enumerate(PYTHON_BLOCKS)])
def test_each_python_fix_parses(cause: str, step: int, block) -> None:
    source = textwrap.dedent("\n".join(block.lines))
    # A fix may show one call or a fragment of a block ("..." for the user's own code).
    try:
        ast.parse(source)
    except SyntaxError as err:
        pytest.fail(f"{cause} step {step}: {err.msg} at line {err.lineno}: {source.splitlines()[(err.lineno or 1) - 1]!r}")


def test_the_terminal_prints_each_line_of_a_fix_whole_at_80_columns() -> None:
    cause = CAUSES["host.overhead_bound"] if "host.overhead_bound" in CAUSES else next(iter(CAUSES.values()))
    parts = section_renderables(FixPage(why=cause.why, fix=tuple(cause.fix), verify=cause.verify))
    code = [p.plain.strip() for p in parts if isinstance(p, CodeLine)]
    expected = [line for step in cause.fix for b in parse_step(step) if b.code for line in b.lines]
    assert expected and all(line.strip() in code for line in expected)
    out = io.StringIO()
    print_renderables(Console(file=out, width=80, color_system=None), parts)
    printed = out.getvalue().splitlines()
    for line in expected:
        if line.strip():
            assert any(p.strip() == line.strip() for p in printed), line  # on one line, not folded
