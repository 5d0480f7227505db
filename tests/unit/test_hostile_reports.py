"""Reports of hostile jobs and hostile files: secrets redacted in every view, job text shown
literally in Markdown and HTML, absurdly nested JSON refused in one line, and a full disk that
leaves the old report as it was."""

from __future__ import annotations

import errno
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

import fieldguide.frontends.headless as headless
import fieldguide.safewrite as safewrite
import fieldguide.walk.session as session_module
from fieldguide.errors import FieldguideError
from fieldguide.frontends.cli import main as cli_main
from fieldguide.report import Findings, load_report, to_html, to_markdown
from fieldguide.report.findings import environment_from, findings_from_walk
from fieldguide.report.mdtext import md_code, md_fence, md_text
from fieldguide.report.merge import render_merged
from fieldguide.report.redact import REDACTED, redact_argv, redact_text
from fieldguide.report.render import render
from fieldguide.report.summary import summary_panel
from fieldguide.safewrite import write_text

# --- redaction ------------------------------------------------------------------------------------

SECRET_LINES = [
    ('{"password": "hunter2"}', "hunter2"),
    ('log \'{\\"api_key\\": \\"abcKEY9\\"}\'', "abcKEY9"),
    ('{"msg": "{\\"password\\": \\"inner77\\", \\"n\\": 1}"}', "inner77"),
    ("cache at redis://:redisPW1@host:6379", "redisPW1"),
    ("db postgres://u:p@w@host/db", "p@w"),
    ("run --pass passX1 --lr 1", "passX1"),
    ("run --pw pwX2", "pwX2"),
    ("run --token:tokX3", "tokX3"),
    ("run --token=tokX4", "tokX4"),
    ("PASSWORD=pwdX5 python train.py", "pwdX5"),
    ("pass=passX6", "passX6"),
]


@pytest.mark.parametrize(("line", "secret"), SECRET_LINES)
def test_a_secret_in_a_line_is_redacted(line: str, secret: str) -> None:
    out = redact_text(line)
    assert secret not in out and REDACTED in out, out


@pytest.mark.parametrize(("argv", "shown"), [
    (["--pass", "X"], ["--pass", REDACTED]),
    (["--pw", "X"], ["--pw", REDACTED]),
    (["--token:X"], [f"--token:{REDACTED}"]),
    (["--token=X"], [f"--token={REDACTED}"]),
    (["PASSWORD=X"], [f"PASSWORD={REDACTED}"]),
    (['{"password": "a=b"}'], [f'{{"password": "{REDACTED}"}}']),  # a JSON argument, not `NAME=value`
    (["--tokenizer", "gpt2", "--passes", "3", "--author", "me"], ["--tokenizer", "gpt2", "--passes", "3",
                                                                   "--author", "me"]),
])
def test_secrets_in_argv(argv: list[str], shown: list[str]) -> None:
    assert redact_argv(["python", *argv]) == ["python", *shown]


@pytest.mark.parametrize("line", [
    "3 nodes pass: all checks", "tokenize (tokenizer.py:88)", "epoch 1 loss 0.25", "key_padding_mask=None",
    "passes=3", "x --tokenizer bert-base", "author=me", "https://example.com/a@b", "git@github.com:org/repo",
    '{"auth": {"user": "a"}}',
])
def test_ordinary_text_is_left_alone(line: str) -> None:
    assert redact_text(line) == line


def test_a_redacted_json_line_is_still_json() -> None:
    line = '{"password": "hunter2", "url": "redis://:pw9@h:1", "b": "c@d", "n": 1}'
    data = json.loads(redact_text(line))
    assert data == {"password": REDACTED, "url": f"redis://:{REDACTED}@h:1", "b": "c@d", "n": 1}


@pytest.mark.parametrize("text", [
    "deadbeef" * 175,  # a 1,400-character hex token
    "w" * 200_000,
    "a=" * 50_000,
    "a:" * 50_000,
    "token=\"" * 20_000,
    "\\\"k\\\":" * 20_000,
    "x://a:" + "a:" * 50_000,
    "--pw " * 20_000,
])
def test_redaction_is_linear(text: str) -> None:
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 0.5


# --- every view of a hostile job --------------------------------------------------------------------

SECRETS = ["sEcret01", "sEcret02", "sEcret03", "sEcret04", "sEcret05", "sEcret06", "sEcret07@w", "sEcret08",
           "sEcret09", "sEcret10", "sEcret11", "sEcret12", "sEcret13", "sEcret14", "sEcret15"]
CMDLINE = ["python", "train.py", "--pass", "sEcret01", "--pw", "sEcret02", "--token:sEcret03", "--token=sEcret04",
           "PASSWORD=sEcret05", "--cache", "redis://:sEcret06@cache:6379", "--db", "postgres://u:sEcret07@w@host/db",
           '{"password": "sEcret08"}', "--note", "<script>alert(1)</script>"]
LOG = ['{"password": "sEcret09"}', 'cfg "{\\"api_key\\": \\"sEcret10\\"}"', "PASSWORD=sEcret11 --pass sEcret12",
       "--token:sEcret13", "```", "<script>alert(2)</script>", "after the fence", "in DataLoader.__next__"]
NOTE = "retried with --pw sEcret14; 3 nodes pass: <img src=x onerror=alert(3)>"
EXIT = {"code": 1, "exception": {"type": "RuntimeError", "where": "train.py:3",
                                 "message": "auth failed at redis://:sEcret15@h:6379 <script>alert(4)</script>"}}


@pytest.fixture
def hostile(walk_with: Any) -> Findings:
    """The findings of a job whose every string is hostile, as the walk makes them."""
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8}, "stacks.sample": {"producer_cpu_fraction": 0.1}})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [], {})
    found = findings_from_walk(walk, {"kind": "launch", "pid": 7, "cmdline": CMDLINE}, env, note=NOTE, log_tail=LOG)
    found.exit = dict(EXIT)
    found.evidence.setdefault("input.data-wait", {})["top_stacks"] = [
        {"share": 0.5, "category": "<b>wait</b>", "stack": "DataLoader.__next__ <- `x` | <script>alert(5)</script>"}]
    return found


@pytest.fixture
def unredacted(hostile: Findings) -> Findings:
    """The same, built as a saved report of an older version would be: nothing redacted yet."""
    data = hostile.to_json()
    data["target"]["cmdline"], data["log_tail"], data["note"], data["exit"] = CMDLINE, LOG, NOTE, EXIT
    found = Findings.from_json(json.loads(json.dumps(data)))
    found.target, found.log_tail, found.note, found.exit = {**found.target, "cmdline": CMDLINE}, LOG, NOTE, EXIT
    return found


def _summary(findings: Findings) -> str:
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(summary_panel(findings))
    return out.getvalue()


@pytest.mark.parametrize("view", ["json", "md", "html", "summary"])
def test_no_secret_reaches_any_view(unredacted: Findings, view: str) -> None:
    text = _summary(unredacted) if view == "summary" else render(unredacted, view)
    for secret in SECRETS:
        if view == "summary" and secret not in (*NOTE.split(), *str(EXIT).split()):
            continue
        assert secret not in text, (view, secret)
    assert REDACTED in text


def test_the_summary_redacts_findings_it_is_handed(unredacted: Findings) -> None:
    text = _summary(unredacted)
    assert "sEcret14" not in text and "sEcret15" not in text and "3 nodes pass:" in text


def test_the_walks_header_shows_the_command_redacted_and_literal(monkeypatch: pytest.MonkeyPatch, hostile: Findings,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    target = SimpleNamespace(kind="launch", pid=7, close=lambda: None)
    monkeypatch.setattr(session_module, "open_target", lambda *a, **k: target)
    monkeypatch.setattr(session_module, "Session", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(headless, "walk_off_main_thread", lambda *a, **k: (hostile, False))
    monkeypatch.setenv("COLUMNS", "1000")  # the header on one line
    cmd = [*CMDLINE, "[red]x[/red]", ":smile:"]
    headless.diagnose_headless("slow-training", None, cmd, None, None, None, show_output=False)
    header = capsys.readouterr().err.splitlines()[0]
    assert header.startswith("fieldguide slow-training on launch python train.py --pass [redacted] --pw [redacted]")
    for secret in SECRETS:
        assert secret not in header
    assert "[red]x[/red] :smile:" in header  # no Rich markup, no emoji made of the job's arguments


# --- Markdown and HTML show the job's text as it is -------------------------------------------------------

def _commonmark(md: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return str(markdown_it.MarkdownIt("commonmark").enable("table").render(md))


def test_markdown_shows_job_text_literally(hostile: Findings) -> None:
    md = to_markdown(hostile)
    # Outside code (where `<` is shown as it is) no tag is left: the note, the exception, the stack's category.
    assert "&lt;img src=x" in md and "&lt;script>alert(4)" in md and "&lt;b>wait" in md
    page = _commonmark(md)
    assert "<script" not in page and "<img" not in page and "<b>wait" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;script&gt;alert(4)" in page
    assert "DataLoader.__next__" in page and "<strong>next</strong>" not in page
    # The log's three backticks do not close its fence: every line is inside the one code block.
    blocks = page.split("<pre><code>")
    log_block = next(b for b in blocks if "after the fence" in b)
    assert "```\n&lt;script&gt;alert(2)&lt;/script&gt;\nafter the fence\nin DataLoader.__next__" in log_block
    assert log_block.index("after the fence") < log_block.index("</code></pre>")


def test_markdown_pieces() -> None:
    assert md_text("DataLoader.__next__ *x* [a](b) <b>c</b> a < b & c &amp; `d`") == \
        r"DataLoader.\_\_next\_\_ \*x\* \[a\](b) &lt;b>c&lt;/b> a < b & c &amp;amp; \`d\`"
    assert md_text("# not a heading") == r"\# not a heading" and md_text("0.25 loss") == "0.25 loss"
    assert md_code("a `` b") == "```a `` b```" and md_code("`x`") == "`` `x` ``"
    assert md_code("a|b", cell=True) == "`a\\|b`"
    fence = md_fence(["x", "````", "y"])
    assert fence[0] == "`````" and fence[-1] == "`````" and fence[1:-1] == ["x", "````", "y"]
    assert md_fence(["plain"])[0] == "```"


def test_html_escapes_job_text(hostile: Findings) -> None:
    page = to_html(hostile)
    assert "<script" not in page and "<img" not in page and "<b>wait" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;script&gt;alert(2)" in page
    assert "&lt;script&gt;alert(4)" in page and "&lt;script&gt;alert(5)" in page and "&lt;img" in page


def test_a_merged_view_shows_hosts_literally(hostile: Findings) -> None:
    merged = {"fieldguide_version": "x", "created": "now", "verdict": "clean", "causes": [], "straggler": None,
              "nodes": [{"host": "<script>h</script>", "verdict": "clean", "cause": "a__b__", "ranks": 1,
                         "step_ms": 1.0, "report": "r|1.json"}], "ranks": []}
    md, page = render_merged(merged, "md"), render_merged(merged, "html")
    assert "<script" not in md and "r\\|1.json" in md and r"a\_\_b\_\_" in md
    assert "<script" not in page and "&lt;script&gt;h" in page


def test_a_saved_reports_field_guide_page_carries_no_raw_html(hostile: Findings) -> None:
    data = hostile.to_json()
    data["first_departure"]["fix"] = ["Run <script>alert(6)</script> then `a <b> c`", "```\nprint('````')\n<script>\n```"]
    md = to_markdown(Findings.from_json(data))
    assert "<script>alert(6)" not in md and "`a <b> c`" in md  # code spans are left as they are
    page = _commonmark(md)
    assert "<script" not in page and "<code>a &lt;b&gt; c</code>" in page
    assert "print('````')\n&lt;script&gt;\n</code></pre>" in page  # one code block, its fence not closed early


# --- nested too deeply ----------------------------------------------------------------------------------

DEEP = {"list": "[" * 100_000 + "]" * 100_000, "object": '{"a":' * 100_000 + "1" + "}" * 100_000,
        "past-the-limit": '{"verdict": "clean", "path": [], "x": ' + "[" * 500 + "]" * 500 + "}"}


def _fieldguide(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fieldguide", *args], capture_output=True, text=True, timeout=60)


def _one_line_refusal(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "is not a fieldguide JSON report" in done.stderr


def test_report_merge_refuses_deep_json_in_one_line(tmp_path: Path) -> None:
    paths = []
    for name, text in DEEP.items():
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(text)
    for path in paths:
        _one_line_refusal(_fieldguide("report", "merge", str(path), str(paths[0 if path != paths[0] else 1])))


@pytest.mark.parametrize("name", list(DEEP))
def test_load_report_refuses_deep_json(tmp_path: Path, name: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text(DEEP[name])
    with pytest.raises(FieldguideError, match="not a fieldguide JSON report"):
        load_report(path)


def test_report_refuses_deep_json_in_one_line(tmp_path: Path) -> None:
    for name, text in DEEP.items():
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        _one_line_refusal(_fieldguide("report", str(path)))


@pytest.mark.parametrize("field", ["target", "environment", "log_tail"])
def test_a_report_whose_fields_have_the_wrong_shape_is_refused(hostile: Findings, field: str) -> None:
    data = hostile.to_json()
    data[field] = "x"
    with pytest.raises(ValueError, match=field):
        Findings.from_json(data)


# --- the safe writer -----------------------------------------------------------------------------------

def test_a_replaced_0600_report_stays_0600_and_a_new_one_gets_the_umask(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text("old")
    os.chmod(old, 0o600)
    previous = os.umask(0o022)
    try:
        write_text(old, "new")
        write_text(tmp_path / "new.json", "new")
    finally:
        os.umask(previous)
    assert old.read_text() == "new" and old.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o644


def _full_disk(*args: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["write", "fsync"])
@pytest.mark.parametrize("existing", [True, False])
def test_a_full_disk_leaves_the_old_report_and_no_temporary_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                 where: str, existing: bool) -> None:
    path = tmp_path / "r.json"
    if existing:
        path.write_text("the old report")
    monkeypatch.setattr(safewrite.os, where, _full_disk)
    with pytest.raises(OSError) as failure:
        write_text(path, "x" * 100_000)
    assert failure.value.errno == errno.ENOSPC
    assert [p.name for p in tmp_path.iterdir()] == (["r.json"] if existing else [])
    if existing:
        assert path.read_text() == "the old report"


def _saved(tmp_path: Path, hostile: Findings, name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(hostile.to_json()))
    return path


@pytest.mark.parametrize("command", ["report", "merge"])
def test_the_cli_says_a_full_disk_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, hostile: Findings,
                                              capsys: pytest.CaptureFixture[str], command: str) -> None:
    first, second = _saved(tmp_path, hostile, "a.json"), _saved(tmp_path, hostile, "b.json")
    other = json.loads(second.read_text())  # another node's walk: the same walk twice is refused
    other["created"] = "2026-12-07T00:00:01Z"
    second.write_text(json.dumps(other))
    out = tmp_path / "out.md"
    out.write_text("the old view")
    args = ["report", str(first)] if command == "report" else ["report", "merge", str(first), str(second)]
    monkeypatch.setattr(safewrite.os, "fsync", _full_disk)
    code = cli_main([*args, "--format", "md", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [f"fieldguide: cannot write {out}: No space left on device"]
    assert out.read_text() == "the old view" and sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json",
                                                                                              "out.md"]


def test_the_walk_says_a_full_disk_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               hostile: Findings) -> None:
    target = SimpleNamespace(kind="launch", pid=7, close=lambda: None)
    monkeypatch.setattr(session_module, "open_target", lambda *a, **k: target)
    monkeypatch.setattr(session_module, "Session", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(headless, "walk_off_main_thread", lambda *a, **k: (hostile, False))
    report = tmp_path / "r.json"
    report.write_text("the old report")
    monkeypatch.setattr(safewrite.os, "fsync", _full_disk)
    with pytest.raises(FieldguideError, match=r"^cannot write the report to .*r\.json: No space left on device$"):
        headless.diagnose_headless("slow-training", None, ["python", "t.py"], report, None, None, show_output=False)
    assert report.read_text() == "the old report" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_tui_names_a_launched_target_with_its_secrets_redacted() -> None:
    from fieldguide.frontends.tui.model import TargetSpec

    spec = TargetSpec(pid=None, cmd=["python", "train.py", "--api-key", "s3cr3tvalue", "--db=redis://:pw@h:6379"])
    shown = spec.describe()
    assert "s3cr3tvalue" not in shown and ":pw@" not in shown and "train.py" in shown
