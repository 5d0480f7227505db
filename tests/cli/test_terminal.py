"""Without a terminal the TUI is never started: plain `fieldguide` says what to run instead (exit 2),
and `diagnose` / `demo` walk headlessly. Headless progress lines show whole notes."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest
from rich.console import Console

from fieldguide.frontends import cli
from fieldguide.frontends.headless import ProgressLine
from tests.cli.test_bad_input import assert_one_line_error
from tests.conftest import FIELDGUIDE


class Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What _dispatch started: ("tui", args) or ("headless", args); nothing is really started."""
    seen: list[tuple[str, Any]] = []
    monkeypatch.setattr(cli, "_tui", lambda *a, **k: seen.append(("tui", a)) or 0)
    monkeypatch.setattr(cli, "_diagnose_headless", lambda *a, **k: seen.append(("headless", a)) or 0)
    monkeypatch.setattr(cli, "demo_command", lambda: ["python", "demo.py"])
    return seen


def dispatch(monkeypatch: pytest.MonkeyPatch, argv: list[str], *, stdin: bool, stdout: bool) -> int:
    monkeypatch.setattr("sys.stdin", Stream(stdin))
    monkeypatch.setattr("sys.stdout", Stream(stdout))
    own, cmd = cli.split_command(argv)
    return cli._dispatch(cli.build_parser().parse_args(own), cmd)


@pytest.mark.parametrize("argv", [[], ["--pid", "1"], ["--", "python", "train.py"]])
def test_plain_fieldguide_without_a_terminal_says_what_to_run(argv: list[str]) -> None:
    # stdin is /dev/null and stdout a pipe: the TUI would wait for keys forever.
    proc = subprocess.run([*FIELDGUIDE, *argv], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=30, env={**os.environ, "NO_COLOR": "1"})
    assert_one_line_error(proc, 2, "the TUI needs a terminal", "fieldguide diagnose --playbook ID --no-tui",
                          "fieldguide playbooks")
    assert proc.stdout == ""
    if argv[:1] == ["--pid"]:
        assert "--pid 1" in proc.stderr


@pytest.mark.parametrize(("stdin", "stdout"), [(False, True), (True, False), (False, False)])
def test_plain_fieldguide_needs_both_stdin_and_stdout_a_terminal(monkeypatch, calls, stdin, stdout) -> None:
    with pytest.raises(cli.FieldguideError, match="the TUI needs a terminal") as err:
        dispatch(monkeypatch, [], stdin=stdin, stdout=stdout)
    assert err.value.exit_code == 2 and calls == []


def test_plain_fieldguide_on_a_terminal_opens_the_tui(monkeypatch, calls) -> None:
    monkeypatch.setenv("TERM", "xterm-256color")
    assert dispatch(monkeypatch, ["--pid", "7"], stdin=True, stdout=True) == 0
    assert calls == [("tui", (7, [], None))]


def test_a_dumb_terminal_gets_the_plain_walk_not_the_full_screen_tui(monkeypatch, calls) -> None:
    monkeypatch.setenv("TERM", "dumb")
    assert dispatch(monkeypatch, ["diagnose", "--playbook", "slow-training", "--pid", "7"], stdin=True, stdout=True) == 0
    assert [kind for kind, _ in calls] == ["headless"]


@pytest.mark.parametrize(("stdin", "stdout", "started"),
                         [(True, True, "tui"), (False, True, "headless"), (True, False, "headless")])
def test_diagnose_goes_headless_unless_stdin_and_stdout_are_a_terminal(monkeypatch, calls, stdin, stdout,
                                                                       started) -> None:
    dispatch(monkeypatch, ["diagnose", "--playbook", "slow-training", "--pid", "7"], stdin=stdin, stdout=stdout)
    assert [kind for kind, _ in calls] == [started]


@pytest.mark.parametrize(("stdin", "stdout", "started"),
                         [(True, True, "tui"), (False, True, "headless"), (True, False, "headless")])
def test_demo_goes_headless_unless_stdin_and_stdout_are_a_terminal(monkeypatch, calls, stdin, stdout,
                                                                   started) -> None:
    dispatch(monkeypatch, ["demo"], stdin=stdin, stdout=stdout)
    assert [kind for kind, _ in calls] == [started]


def test_a_closed_or_missing_stream_is_not_a_terminal(monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", None)
    monkeypatch.setattr("sys.stdout", Stream(True))
    assert not cli.on_terminal()


LONG_NOTE = ("could not measure: the agent did not answer within 10 s; the target may be blocked in a C "
             "extension or stopped (SIGSTOP) at /home/user/project/src/some/deep/module_with_a_long_name.py:123 "
             "THE-END-OF-THE-NOTE")


@pytest.mark.parametrize("width", [80, 120, 40])
def test_a_long_progress_note_wraps_whole_under_its_line(width: int) -> None:
    console = Console(width=width, record=True, color_system=None)
    console.print(ProgressLine("input.data-wait", "error", 3.2, LONG_NOTE))
    lines = console.export_text().splitlines()
    assert lines[0].startswith("  input.data-wait") and "error" in lines[0] and "3.2 s" in lines[0]
    assert all(len(line) <= width for line in lines)
    assert len(lines) > 1
    body = lines[1:]
    indent = min(len(line) - len(line.lstrip()) for line in body if line.strip())
    assert indent >= 4  # under the line, not at the margin
    joined = "".join(line.strip() for line in lines)
    assert "".join(LONG_NOTE.split()) in "".join(joined.split())


def test_a_short_progress_note_is_one_line() -> None:
    console = Console(width=120, record=True, color_system=None)
    console.print(ProgressLine("env.debug-flags", "pass", 0.4, "torch.flags"))
    assert console.export_text().rstrip().splitlines() == [
        "  env.debug-flags          pass      0.4 s  torch.flags"]


def test_progress_notes_are_not_read_as_markup() -> None:
    console = Console(width=120, record=True, color_system=None)
    console.print(ProgressLine("n.x", "error", 0.0, "bad value [/dim] in [bold]x"))
    assert "bad value [/dim] in [bold]x" in console.export_text()
