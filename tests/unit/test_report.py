"""Findings from a walk, the JSON contract, the Markdown/HTML renderers, and redaction of secrets."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fg_fakes import healthy_values

from fieldguide import __version__
from fieldguide.measurement import Measurement
from fieldguide.report import (
    Findings,
    findings_from_walk,
    to_html,
    to_markdown,
    write_report,
)
from fieldguide.report.findings import environment_from
from fieldguide.report.redact import (
    REDACTED,
    is_secret_name,
    redact_argv,
    redact_env,
    redact_text,
    redact_tree,
)
from fieldguide.report.render import format_for, render
from fieldguide.report.summary import summary_panel

HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"
SECRETS = ["tok-s3cr3t-abc", "XYZ-api-789", HF, "hunter2pass", "pa55word-log", "wandbsecretvalue", "k3y-from-env"]
CMDLINE = ["python", "train.py", "--lr", "0.1", "--token", "tok-s3cr3t-abc", "--api-key=XYZ-api-789",
           f"HF_TOKEN={HF}", "--db", "postgres://trainer:hunter2pass@db.example.com:5432/runs", "--note=<b>x</b>"]
LOG_TAIL = ["epoch 0 step 10 loss 0.52", f"logging in with {HF}", "db password=pa55word-log",
            "export WANDB_API_KEY=wandbsecretvalue"]
TARGET = {"kind": "launch", "pid": 1234, "cmdline": CMDLINE}

STATUSES = {"pass", "depart", "skip", "error"}


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv("HF_TOKEN", "k3y-from-env")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    return environment_from({"python": "3.11.7", "torch": "2.13.0", "cuda": None, "cpu_cores": 8, "nvml": "ok"}, [])


@pytest.fixture
def departure(small_walk_with, env) -> Findings:
    walk, _ = small_walk_with({"loop.steps": {"data_wait_fraction": 0.8},
                         "stacks.sample": {"producer_cpu_fraction": 0.1}})
    return findings_from_walk(walk, TARGET, env, log_tail=LOG_TAIL)


@pytest.fixture
def clean(small_walk_with, env) -> Findings:
    walk, _ = small_walk_with()
    return findings_from_walk(walk, TARGET, env)


def check_contract(data: dict[str, Any]) -> None:
    """Every CONTRACT.md minimum field, with its type."""
    assert data["fieldguide_version"] == __version__ == "0.1.0"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created"])
    datetime.strptime(data["created"], "%Y-%m-%dT%H:%M:%SZ")
    assert data["playbook"] == "small"
    target = data["target"]
    assert target["kind"] in {"launch", "attach", "local"}
    assert isinstance(target["pid"], int)
    assert isinstance(target["cmdline"], list) and all(isinstance(a, str) for a in target["cmdline"])
    env = data["environment"]
    for key in ("python", "torch", "cuda", "gpus"):
        assert key in env
    assert isinstance(env["python"], str) and isinstance(env["torch"], str)
    assert env["cuda"] is None or isinstance(env["cuda"], str)
    assert isinstance(env["gpus"], list)
    assert data["verdict"] in {"departure", "clean", "inconclusive"}
    dep = data["first_departure"]
    if data["verdict"] == "departure":
        assert isinstance(dep, dict)
        for key in ("node", "cause", "title", "expected", "summary", "verify"):
            assert isinstance(dep[key], str) and dep[key], key
        assert isinstance(dep["measured"], dict)
        assert isinstance(dep["fix"], list) and dep["fix"] and all(isinstance(s, str) for s in dep["fix"])
        assert data["conclusion"] is None
    else:
        assert dep is None
    assert data["conclusion"] is None or isinstance(data["conclusion"], str)
    assert isinstance(data["path"], list) and data["path"]
    for step in data["path"]:
        assert set(step) >= {"node", "status", "measured", "expected", "probe", "seconds", "note"}
        assert isinstance(step["node"], str) and step["status"] in STATUSES
        assert isinstance(step["measured"], dict) and isinstance(step["expected"], str)
        assert step["probe"] is None or isinstance(step["probe"], str)
        assert isinstance(step["seconds"], (int, float)) and not isinstance(step["seconds"], bool)
        assert isinstance(step["note"], str)


# --- JSON ----------------------------------------------------------------------------------------------

def test_departure_json_has_every_contract_field(departure):
    data = json.loads(render(departure, "json"))
    check_contract(data)
    assert data["verdict"] == "departure"
    dep = data["first_departure"]
    assert dep["node"] == "waits"
    assert dep["cause"] == "input.waiting"
    assert dep["title"] == "The training loop waits for its next batch, and producing a batch is mostly waiting"
    assert dep["measured"] == {"data_wait_fraction": 0.8, "producer_cpu_fraction": 0.1}
    assert dep["expected"] == "data_wait_fraction < 0.1 ; producer_cpu_fraction < 0.5"
    assert dep["summary"].startswith("80% of each step is spent waiting for the next batch (in DataLoader.__next__)")
    assert [s["node"] for s in data["path"]] == ["trains", "waits", "makes"]
    assert [s["status"] for s in data["path"]] == ["pass", "depart", "pass"]
    assert data["path"][1] == {"node": "waits", "status": "depart", "measured": {"data_wait_fraction": 0.8},
                               "expected": "data_wait_fraction < 0.1", "probe": "loop.steps", "seconds": 0.25,
                               "note": ""}
    assert data["environment"]["python"] == "3.11.7" and data["environment"]["cuda"] is None
    assert data["target"]["pid"] == 1234
    assert data["units"]["data_wait_fraction"] == "fraction"
    assert data["evidence"]["waits"]["probe"] == "loop.steps"


def test_clean_json(clean):
    data = clean.to_json()
    check_contract(data)
    assert data["verdict"] == "clean"
    assert data["first_departure"] is None
    assert data["conclusion"] == "device.compute_bound"
    assert data["conclusion_text"].startswith("Steps are spent computing")
    assert [s["node"] for s in data["path"]] == ["trains", "waits", "blocks"]
    assert [s["status"] for s in data["path"]] == ["pass"] * 3


def test_inconclusive_findings_carry_the_reason(small_walk_with, env):
    base = {p: Measurement.cannot(p, "no agent") for p in healthy_values()}
    walk, _ = small_walk_with(base=base)
    findings = findings_from_walk(walk, TARGET, env)
    data = findings.to_json()
    check_contract(data)
    assert data["verdict"] == "inconclusive"
    assert data["conclusion"] is None and data["first_departure"] is None
    assert data["note"] == "could not tell whether it trains, so no cause: training.activity: no agent"
    assert [s["node"] for s in data["path"]] == ["trains"]
    assert all(s["status"] == "error" and s["note"] for s in data["path"])


def test_inconclusive_findings_past_target_trains_carry_every_reason(small_walk_with, env):
    base = {p: Measurement.cannot(p, "no agent") for p in healthy_values()}
    base["training.activity"] = healthy_values()["training.activity"]
    walk, _ = small_walk_with(base=base)
    data = findings_from_walk(walk, TARGET, env).to_json()
    check_contract(data)
    assert data["verdict"] == "inconclusive"
    assert data["conclusion"] is None and data["first_departure"] is None
    assert data["note"].startswith("could not measure waits")
    assert data["path"][0]["node"] == "trains" and data["path"][0]["status"] == "pass"
    assert all(s["status"] == "error" and s["note"] for s in data["path"][1:])


def test_a_walk_that_does_not_train_reports_why_and_no_cause(small_walk_with, env):
    why = "forward only: a model being served, not trained in 300 samples over 6 s"
    walk, _ = small_walk_with({"training.activity": {"trains": False, "seen": why}})
    data = findings_from_walk(walk, TARGET, env).to_json()
    check_contract(data)
    assert data["verdict"] == "inconclusive"
    assert data["first_departure"] is None and data["conclusion"] is None
    assert data["note"] == f"not a training job, so no cause: {why}"
    assert [(s["node"], s["status"], s["measured"]) for s in data["path"]] == [
        ("trains", "depart", {"trains": False})]


def test_a_given_note_comes_first_then_the_caveat(small_walk_with, env):
    walk, _ = small_walk_with(base={p: Measurement.cannot(p, "x") for p in healthy_values()})
    findings = findings_from_walk(walk, TARGET, env, note="interrupted by the user")
    assert findings.note == "interrupted by the user; could not tell whether it trains, so no cause: training.activity: x"


def test_a_clean_attach_walk_says_what_it_did_not_measure(small_walk_with, env):
    # No py-spy: the debug switches read from outside still measure, the stack windows cannot.
    no_spy = Measurement.cannot("stacks.sample", "py-spy is not installed", applicable=False)
    walk, _ = small_walk_with({"stacks.sample": no_spy}, caps=frozenset({"process"}))
    findings = findings_from_walk(walk, TARGET, env)
    assert findings.verdict == "clean"
    assert findings.note.startswith("not measured on this target: waits, blocks")


def test_from_json_round_trips(departure):
    data = departure.to_json()
    again = Findings.from_json(json.loads(json.dumps(data)))
    assert again.to_json() == data
    assert again.verdict == "departure" and again.first_departure["cause"] == "input.waiting"


def test_rendering_a_saved_report_matches_rendering_the_findings(departure):
    again = Findings.from_json(departure.to_json())
    assert again.playbook_title == "A small walk"
    assert to_markdown(again) == to_markdown(departure)


# --- Markdown and HTML ----------------------------------------------------------------------------------

def test_markdown_has_cause_summary_and_fix_code(departure):
    md = to_markdown(departure)
    assert md.startswith("# fieldguide report: A small walk\n")
    assert "## Verdict: Departure found" in md
    assert "Cause `input.waiting` at node `waits`." in md
    # The summary shown as it is: `__next__` escaped, not a bold "next".
    assert departure.first_departure["summary"].replace("__next__", r"\_\_next\_\_") in md
    assert "```python" in md and "num_workers=8" in md
    assert "| data_wait_fraction | 80% |" in md
    assert "| waits | ✗ depart | data_wait_fraction=80% | `data_wait_fraction < 0.1` | loop.steps |" in md
    assert "| trains | ✓ pass | trains=yes | `trains == true` | training.activity |" in md
    assert "### Why it costs" in md and "### Fix" in md and "### Verify" in md
    assert "## Target output (last lines)" in md


def test_markdown_clean(clean):
    md = to_markdown(clean)
    assert "## Verdict: Clean" in md
    assert "Healthy leaf `device.compute_bound`" in md


def test_markdown_escapes_pipes_in_notes(small_walk_with, env):
    walk, _ = small_walk_with({"stacks.sample": Measurement.cannot("stacks.sample", "a|b")})
    md = to_markdown(findings_from_walk(walk, TARGET, env))
    assert "a\\|b" in md


def test_html_has_cause_summary_fix_code_and_escapes(departure):
    page = to_html(departure)
    assert page.startswith("<!doctype html>")
    assert "<code>input.waiting</code>" in page
    assert f"<p>{departure.first_departure['summary']}</p>" in page
    assert "<pre><code>loader = DataLoader(ds, batch_size=64, num_workers=8," in page
    assert "data_wait_fraction &lt; 0.1" in page and "data_wait_fraction < 0.1" not in page
    assert "--note=&lt;b&gt;x&lt;/b&gt;" in page and "<b>x</b>" not in page
    assert page.rstrip().endswith("</body></html>")


def test_write_report_picks_the_format_from_the_suffix(departure, tmp_path):
    j = write_report(departure, tmp_path / "out" / "r.json")
    assert json.loads(j.read_text())["first_departure"]["cause"] == "input.waiting"
    assert write_report(departure, tmp_path / "r.md").read_text().startswith("# fieldguide report")
    assert write_report(departure, tmp_path / "r.markdown").read_text().startswith("# fieldguide report")
    assert write_report(departure, tmp_path / "r.html").read_text().startswith("<!doctype html>")
    assert write_report(departure, tmp_path / "r.htm").read_text().startswith("<!doctype html>")
    json.loads(write_report(departure, tmp_path / "r").read_text())  # no suffix: JSON
    with pytest.raises(ValueError, match="the suffix .txt names no report format"):
        write_report(departure, tmp_path / "r.txt")  # it would hold JSON it does not say it holds
    assert write_report(departure, tmp_path / "x.json", "html").read_text().startswith("<!doctype html>")
    assert not list(tmp_path.rglob("*.tmp"))


def test_format_for_and_unknown_format(departure):
    assert format_for(Path("a.HTML"), None) == "html"
    assert format_for(Path("a.md"), "json") == "json"
    with pytest.raises(ValueError, match="unknown report format 'pdf'"):
        render(departure, "pdf")


def test_rich_summary_renders_the_departure(departure):
    from rich.console import Console

    from fieldguide.report.summary import summary_panel

    console = Console(record=True, width=120, color_system=None)
    console.print(summary_panel(departure))
    text = console.export_text()
    assert "input.waiting" in text and "80% of each step" in text and "input.data-wait" in text


@pytest.mark.parametrize("verdict", ["inconclusive", "departure", "clean"])
def test_the_rich_summary_keeps_the_whole_verdict_at_80_columns(small_walk_with, env, verdict):
    from rich.console import Console

    from fieldguide.report.vocabulary import verdict_text

    if verdict == "inconclusive":
        walk, _ = small_walk_with(base={p: Measurement.cannot(p, "no agent") for p in healthy_values()})
    elif verdict == "departure":
        walk, _ = small_walk_with({"loop.steps": {"data_wait_fraction": 0.8},
                             "stacks.sample": {"producer_cpu_fraction": 0.1}})
    else:
        walk, _ = small_walk_with()
    findings = findings_from_walk(walk, TARGET, env)
    assert findings.verdict == verdict
    console = Console(width=80, record=True, color_system=None)
    console.print(summary_panel(findings))
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "…" not in lines[0]  # the title is never cut
    assert f"fieldguide · small · {verdict}" in lines[0]
    assert verdict_text(verdict) in lines[1]  # the verdict's sentence, whole, first in the panel


# --- redaction -----------------------------------------------------------------------------------------

def test_redact_argv():
    assert redact_argv(CMDLINE) == [
        "python", "train.py", "--lr", "0.1", "--token", REDACTED, f"--api-key={REDACTED}", f"HF_TOKEN={REDACTED}",
        "--db", f"postgres://trainer:{REDACTED}@db.example.com:5432/runs", "--note=<b>x</b>"]


@pytest.mark.parametrize("argv", [
    ["--password", "hunter2"], ["--secret-key", "abc"], ["--auth-token", "abc"], ["--api_key", "abc"],
    ["--private-key", "abc"], ["--access-token", "abc"],
])
def test_redact_argv_secret_flags(argv):
    assert redact_argv(argv) == [argv[0], REDACTED]


@pytest.mark.parametrize("arg", ["--hf-token=abc", "--password=x", "DB_PASSWORD=x", "--wandb_api_key=abc"])
def test_redact_argv_secret_assignments(arg):
    name = arg.partition("=")[0]
    assert redact_argv([arg]) == [f"{name}={REDACTED}"]


def test_a_source_files_line_is_no_secret_even_when_the_file_is_named_for_one():
    # Stacks name tokenizers' files; a try-fix row names the job's line.
    for text in ("tokenize (tokenizer.py:88)", "num_workers=4 at hf_trainer_tokenize_cpu.py:70 via transformers",
                 "Tokenizer.encode (tokenization_utils_base.py:2600)"):
        assert redact_text(text) == text
    assert redact_text("token.txt:hunter2") == f"token.txt:{REDACTED}"
    assert redact_text("HF_TOKEN: 1234") == f"HF_TOKEN: {REDACTED}"


def test_long_runs_of_name_characters_are_read_once():
    # A 1,400-character hex token once took 18 s (the name pattern was tried from inside the run).
    token = "deadbeef" * 2000
    assert redact_text(f"step 3 {token} done") == f"step 3 {REDACTED} done"
    words = "a_" * 20000
    assert redact_text(words + " ok") == words + " ok"
    assert redact_text("foo=bar,token=hunter2 --token abc --lr 0.1") == \
        f"foo=bar,token={REDACTED} --token {REDACTED} --lr 0.1"


def test_ordinary_args_are_untouched():
    argv = ["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--lr", "0.1",
            "--batch-size", "64", "--epochs=3", "--data", "/data/imagenet", "--url", "https://example.com/x"]
    assert redact_argv(argv) == argv


def test_redact_argv_dash_key_flag():
    assert redact_argv(["--wandb-key", "abc123"]) == ["--wandb-key", REDACTED]


@pytest.mark.parametrize(("line", "secret"), [
    (f"logging in with {HF}", HF),
    ("password=pa55word", "pa55word"),
    ("api_key: abc123def", "abc123def"),
    ("export WANDB_API_KEY=wandbsecret", "wandbsecret"),
    ('token = "quoted secret"', "quoted secret"),
    ("fetch https://bob:s3cr3t@example.com/data failed", "s3cr3t"),
    ("key sk-abcdefghijklmnopqrstuvwxyz used", "sk-abcdefghijklmnopqrstuvwxyz"),
    ("AWS key AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("gh token ghp_abcdefghijklmnopqrstuvwx", "ghp_abcdefghijklmnopqrstuvwx"),
])
def test_redact_text(line, secret):
    out = redact_text(line)
    assert secret not in out and REDACTED in out


def test_redact_text_keeps_ordinary_log_lines():
    for line in ["epoch 3 step 120 loss 0.4211 lr 0.001", "Saved checkpoint to /ckpt/model_0003.pt",
                 "https://download.pytorch.org/whl/cpu", "tokens/s: 1200"]:
        assert redact_text(line) == line


def test_redact_env():
    env = {"WANDB_API_KEY": "w", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
           "HF_TOKEN": "t", "GITHUB_TOKEN": "g", "DB_PASSWORD": "p", "CUDA_VISIBLE_DEVICES": "0,1",
           "OMP_NUM_THREADS": "4", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    out = redact_env(env)
    for name in ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "HF_TOKEN", "GITHUB_TOKEN",
                 "DB_PASSWORD"):
        assert out[name] == REDACTED, name
    assert out["CUDA_VISIBLE_DEVICES"] == "0,1" and out["OMP_NUM_THREADS"] == "4"
    assert out["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


@pytest.mark.parametrize(("name", "secret"), [
    ("WANDB_API_KEY", True), ("AWS_SECRET_ACCESS_KEY", True), ("HF_TOKEN", True), ("MY_PASSWD", True),
    ("credentials_file", True), ("CUDA_VISIBLE_DEVICES", False), ("lr", False), ("batch-size", False),
    ("autograd_profiler", False), ("data_wait_fraction", False),
])
def test_is_secret_name(name, secret):
    assert is_secret_name(name) is secret


def test_redact_tree():
    tree = {"password": "x", "nested": [{"api_key": "y", "count": 3}, f"line with {HF}"], "token_count": 5}
    assert redact_tree(tree) == {"password": REDACTED, "nested": [{"api_key": REDACTED, "count": 3},
                                                                  f"line with {REDACTED}"], "token_count": 5}


def test_environment_variables_in_the_report_are_redacted(env):
    assert env["variables"]["HF_TOKEN"] == REDACTED
    assert env["variables"]["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("fmt", ["json", "md", "html"])
def test_no_secret_reaches_any_report_format(departure, fmt):
    text = render(departure, fmt)
    for secret in SECRETS:
        assert secret not in text, (fmt, secret)
    assert "train.py" in text and "--lr" in text


def test_report_keeps_the_harmless_parts_of_the_cmdline_and_log(departure):
    data = departure.to_json()
    assert data["target"]["cmdline"][:4] == ["python", "train.py", "--lr", "0.1"]
    assert data["log_tail"][0] == "epoch 0 step 10 loss 0.52"
    assert data["log_tail"][1] == f"logging in with {REDACTED}"


def test_redaction_does_not_mangle_the_field_guide(slow_training):
    for cause in slow_training.causes.values():
        for text in (cause.title, cause.summary, cause.why, cause.verify, *cause.fix):
            assert redact_text(text) == text, cause.id
    for node in slow_training.nodes.values():
        assert redact_text(node.why) == node.why and redact_text(node.question) == node.question


def test_report_fix_steps_are_the_cause_pages_verbatim(departure, slow_training):
    data = departure.to_json()
    cause = slow_training.causes["input.waiting"]
    assert data["first_departure"]["fix"] == list(cause.fix)
    assert data["first_departure"]["verify"] == cause.verify


def test_secrets_inside_one_argument_and_in_log_lines_are_redacted(small_walk_with, env):
    walk, _ = small_walk_with()
    target = {"kind": "launch", "pid": 1, "cmdline": ["bash", "-c", "python train.py --token abc123def"]}
    log = ["Authorization: Bearer abcdefghijk123", "OPENAI_KEY=sk9s8d7f6", "DB_PWD=hunter2",
           "--password hunter2 given"]
    text = json.dumps(findings_from_walk(walk, target, env, log_tail=log).to_json())
    for secret in ("abc123def", "abcdefghijk123", "sk9s8d7f6", "hunter2"):
        assert secret not in text


def test_environment_variables_come_from_the_target_and_are_redacted():
    env = environment_from({}, [], {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "hf_x", "HOME": "/root"})
    assert env["variables"] == {"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "[redacted]"}


# --- reruns, exit, and one vocabulary and fix-step renderer for every view ------------------------------

def rerun_result(node: str = "waits", status: str = "pass", fraction: float = 0.02):
    from fieldguide.walk.engine import NodeResult

    m = Measurement("loop.steps", values={"data_wait_fraction": fraction}, units={"data_wait_fraction": "fraction"})
    return NodeResult(node=node, status=status, measured={"data_wait_fraction": fraction},
                      expected="data_wait_fraction < 0.1", probe="loop.steps", seconds=6.04, note="", measurement=m)


def test_reruns_are_absent_when_empty_and_round_trip_when_recorded(departure):
    assert "reruns" not in departure.to_json() and "exit" not in departure.to_json()
    departure.record_rerun(rerun_result(), "remeasure", "2026-12-02T12:01:00Z")
    departure.record_rerun(rerun_result("blocks", "depart", 0.5), "jump", "2026-12-02T12:02:00Z")
    data = json.loads(render(departure, "json"))
    check_contract(data)  # the contract's fields are unchanged
    assert data["reruns"][0] == {"node": "waits", "action": "remeasure", "status": "pass",
                                 "measured": {"data_wait_fraction": 0.02}, "expected": "data_wait_fraction < 0.1",
                                 "note": "", "probe": "loop.steps", "seconds": 6.04, "when": "2026-12-02T12:01:00Z"}
    assert [r["action"] for r in data["reruns"]] == ["remeasure", "jump"]
    again = Findings.from_json(data)
    assert again.reruns == data["reruns"] and again.to_json() == data
    with pytest.raises(ValueError, match="unknown action"):
        departure.record_rerun(rerun_result(), "retry")


def test_reruns_are_shown_in_markdown_html_and_the_rich_summary(departure):
    from rich.console import Console

    departure.record_rerun(rerun_result(), "remeasure", "2026-12-02T12:01:00Z")
    md = to_markdown(departure)
    assert "## Measured again in the TUI" in md
    assert ("| 2026-12-02T12:01:00Z | re-measure | waits | ✓ pass | data_wait_fraction=2% | "
            "`data_wait_fraction < 0.1` | 6.0 |  |") in md
    page = to_html(departure)
    assert "<h2>Measured again in the TUI</h2>" in page and "<td class='k'>re-measure</td>" in page
    console = Console(record=True, width=120, color_system=None)
    console.print(summary_panel(departure))
    text = console.export_text()
    assert "Measured again in the TUI" in text and "re-measure" in text


def test_a_saved_report_with_bad_reruns_is_refused(departure):
    data = departure.to_json()
    data["reruns"] = [{"node": "x"}]
    with pytest.raises(ValueError, match="reruns entries"):
        Findings.from_json(data)
    data["reruns"], data["exit"] = [], "crashed"
    with pytest.raises(ValueError, match="exit"):
        Findings.from_json(data)


ENDED = {"code": 1, "signal": None, "exception": {"type": "RuntimeError", "message": "boom", "where": "train.py:12"},
         "steps": 3, "text": "the target exited with status 1 (RuntimeError: boom)"}


def test_exit_is_emitted_only_when_set_and_shown_everywhere(departure):
    from rich.console import Console

    from fieldguide.report.findings import exit_text

    departure.exit = dict(ENDED)
    data = departure.to_json()
    assert data["exit"] == ENDED and Findings.from_json(data).exit == ENDED
    line = "The target ended: exit code 1 · RuntimeError: boom (train.py:12)"
    assert departure.exit_line() == line
    assert line in to_markdown(departure) and html_escape(line) in to_html(departure)
    console = Console(record=True, width=120, color_system=None)
    console.print(summary_panel(departure))
    assert line in console.export_text()
    assert exit_text({"code": None, "signal": "SIGKILL", "exception": None}) == "signal SIGKILL"
    assert exit_text({"code": None, "signal": None, "exception": None, "text": "pid 9 exited"}) == "pid 9 exited"
    departure.exit = None
    assert "The target ended" not in to_markdown(departure)


def html_escape(text: str) -> str:
    import html

    return html.escape(text)


def test_one_vocabulary_in_every_view(departure):
    from rich.console import Console

    from fieldguide.report.vocabulary import GLYPH, STATUS_MARK, STATUSES, VERDICT_TEXT, WORD

    assert set(STATUS_MARK) == set(STATUSES) == STATUSES_IN_CONTRACT
    assert len(set(GLYPH.values())) == len(GLYPH)  # each state is told apart without colour
    assert set(WORD) == set(GLYPH)
    console = Console(record=True, width=160, color_system=None)
    console.print(summary_panel(departure))
    text = console.export_text()
    for view in (to_markdown(departure), to_html(departure), text):
        assert STATUS_MARK["depart"] in view and STATUS_MARK["pass"] in view
    assert VERDICT_TEXT["departure"] in text and VERDICT_TEXT["departure"] in to_markdown(departure)


STATUSES_IN_CONTRACT = {"pass", "depart", "skip", "error"}


STEP = """Overlap the waits with more workers:
```python
loader = DataLoader(ds, num_workers=8,
                    persistent_workers=True)

x = 1
```
Then measure again with `fieldguide diagnose`."""


def test_fix_steps_parse_into_prose_and_code():
    from fieldguide.report.fixsteps import Block, parse_step

    assert parse_step(STEP) == [
        Block(("Overlap the waits with more workers:",)),
        Block(("loader = DataLoader(ds, num_workers=8,", "                    persistent_workers=True)", "",
               "x = 1"), code=True, lang="python"),
        Block(("Then measure again with `fieldguide diagnose`.",)),
    ]
    assert parse_step("```\nunclosed\n") == [Block(("unclosed",), code=True)]


def test_one_fix_step_renderer_for_markdown_html_and_the_tui_page():
    from fieldguide.report.fixsteps import page_html, page_markdown, steps_html, steps_markdown

    md = steps_markdown([STEP, "Second step."])
    assert md == ["1. Overlap the waits with more workers:", "   ```python",
                  "   loader = DataLoader(ds, num_workers=8,", "                       persistent_workers=True)", "",
                  "   x = 1", "   ```", "   Then measure again with `fieldguide diagnose`.", "",
                  "2. Second step.", ""]
    page = steps_html([STEP])
    assert page.startswith("<ol><li>Overlap the waits") and page.endswith("</li></ol>")
    assert "<pre><code>loader = DataLoader(ds, num_workers=8,\n" in page
    assert "<code>fieldguide diagnose</code>" in page
    guide = page_markdown("Why.", [STEP], "Verify it.")
    assert guide.split("\n")[0] == "## Why it costs" and "## Fix" in guide and guide.rstrip().endswith("Verify it.")
    assert "\n".join(md[:8]) in guide
    assert page_markdown("", ["a"], "").startswith("## Fix")  # an old report without `why`
    assert "<h3>Verify</h3><p>run <code>x</code></p>" in page_html("w", ["a"], "run `x`")


def test_markdown_fix_steps_are_the_shared_renderers(departure):
    from fieldguide.report.fixsteps import steps_markdown

    md = to_markdown(departure)
    assert "\n".join(steps_markdown(departure.first_departure["fix"])) in md


def test_findings_chain_and_top_stacks(departure):
    assert [s["node"] for s in departure.chain()] == ["waits", "makes"]
    departure.evidence["makes"]["top_worker_stacks"] = [{"share": 0.5, "category": "io", "stack": "read"}]
    assert departure.top_stacks(["makes"]) == ("DataLoader workers",
                                               [{"share": 0.5, "category": "io", "stack": "read"}])
    departure.evidence["makes"]["top_stacks"] = [{"share": 0.9, "category": "wait", "stack": "recv"}]
    assert departure.top_stacks()[0] == "main thread"
    assert departure.top_stacks(["trains"]) == ("", [])
