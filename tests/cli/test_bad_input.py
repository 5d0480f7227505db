"""Every bad input gets one line on stderr, no traceback, and the contract's exit status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import FIELDGUIDE, run_fieldguide


def assert_one_line_error(proc: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("fieldguide:")]
    assert len(errors) == 1, proc.stderr  # one line of error (progress lines may precede it)
    first = errors[0]
    for needle in needles:
        assert needle in first, first


def test_unknown_playbook() -> None:
    proc = run_fieldguide("diagnose", "--playbook", "no-such-book", "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "unknown playbook 'no-such-book'", "slow-training")


@pytest.mark.parametrize(("body", "needles"), [
    ("id: x\ntitle: [unclosed\n", ["bad.yaml:3", "bad YAML", "on line 2"]),
    ("id: x\ntitle: t\npurpose: p\nstart: a\nnodes:\n  - id: a\n    question: q\n    why: w\n"
     "    measure: [{probe: no.such.probe, expect: {v: {below: 1}}}]\n    pass: {leaf: a.b}\n    depart: {cause: host.debug_mode}\n",
     ["bad.yaml:9", "node a", "measure[0].probe", "unknown probe 'no.such.probe'"]),
    ("id: x\ntitle: t\npurpose: p\nstart: a\nnodes:\n  - id: a\n    question: q\n    why: w\n    colour: red\n"
     "    measure: [{probe: loop.steps, expect: {steps: {above: 1}}}]\n    pass: {leaf: a.b}\n    depart: {cause: host.debug_mode}\n",
     ["bad.yaml:9", "node a", "field colour", "unknown field"]),
    ("id: x\ntitle: t\npurpose: p\nstart: a\nleaves: {a.b: fine}\nnodes:\n  - id: a\n    question: q\n    why: w\n"
     "    measure: [{probe: loop.steps, expect: {steps: {above: 1}}}]\n    pass: {leaf: a.b}\n",
     ["bad.yaml:7", "node a", "field depart", "is missing"]),
])
def test_malformed_playbook(tmp_path: Path, body: str, needles: list[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    proc = run_fieldguide("diagnose", "--playbook", str(path), "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, *needles)


def _free_pid() -> int:
    pid = 4_000_000
    while psutil.pid_exists(pid):
        pid += 1
    return pid


def test_pid_that_does_not_exist() -> None:
    pid = _free_pid()
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--pid", str(pid))
    assert_one_line_error(proc, 2, f"no process with pid {pid}")


def test_pid_that_is_not_python() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--pid", str(sleeper.pid))
        assert_one_line_error(proc, 2, f"pid {sleeper.pid} is not a Python process")
        assert sleeper.poll() is None, "an attached process must never be killed"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_pid_of_another_user(monkeypatch: pytest.MonkeyPatch) -> None:
    # Constructed: psutil reports another owner and we are not root.
    from fieldguide.errors import BadInput
    from fieldguide.targets import attach as targets

    class FakeProcess:
        def __init__(self, pid: int):
            self.pid = pid

        def uids(self):
            return __import__("types").SimpleNamespace(real=54321, effective=54321, saved=54321)

        def cmdline(self):
            return ["python", "train.py"]

        def status(self):
            return psutil.STATUS_RUNNING

    monkeypatch.setattr(targets.psutil, "Process", FakeProcess)
    monkeypatch.setattr(targets.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(targets.os, "getuid", lambda: 1000)
    with pytest.raises(BadInput, match="belongs to another user"):
        targets.AttachTarget(4242)


def test_ptrace_not_permitted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Yama scope 1 without CAP_SYS_PTRACE (constructed readings): attaching fails before py-spy runs."""
    from fieldguide.errors import BadInput
    from fieldguide.targets import attach as targets

    real = targets.ptrace_denial
    monkeypatch.setattr(targets, "ptrace_denial", lambda: real(capabilities_hex="0", yama_scope=1))
    python = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        with pytest.raises(BadInput, match="ptrace not permitted.*ptrace_scope is 1"):
            targets.AttachTarget(python.pid)
        assert python.poll() is None
    finally:
        python.kill()
        python.wait()


def test_ptrace_denied_message_says_how_to_allow() -> None:
    from fieldguide.host.access import ptrace_denial

    text = ptrace_denial(capabilities_hex="0", yama_scope=1)
    assert text is not None
    for needle in ("ptrace not permitted", "ptrace_scope", "CAP_SYS_PTRACE", "launch mode"):
        assert needle in text


def test_command_not_found(tmp_path: Path) -> None:
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(tmp_path / "r.json"),
                          "--", "no-such-command-xyz")
    assert_one_line_error(proc, 3, "command not found: no-such-command-xyz")


def test_command_exits_before_it_was_measured(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text("print('loading data'); print('oops, no such file: data.bin'); raise SystemExit(4)\n")
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--", sys.executable, str(script))
    assert_one_line_error(proc, 3, "exited with status 4 before it could be measured")
    assert "oops, no such file: data.bin" in proc.stderr  # its last output lines are shown


def test_diagnose_needs_one_target() -> None:
    proc = run_fieldguide("diagnose", "--playbook", "slow-training")
    assert_one_line_error(proc, 2, "exactly one target")


def test_report_of_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("[1, 2]")
    proc = run_fieldguide("report", str(bad))
    assert_one_line_error(proc, 2, "is not a fieldguide JSON report")


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_ends_the_launched_target_and_writes_a_partial_report(tmp_path: Path, sig: int) -> None:
    from fieldguide import workloads

    report = tmp_path / "partial.json"
    proc = subprocess.Popen([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--report", str(report),
                             "--", sys.executable, str(workloads.path("healthy_mlp"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="60", NO_COLOR="1"))
    # Wait until the walk has judged its first node (its progress line on stderr), so the report has a path.
    assert proc.stdout is not None and proc.stderr is not None
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    reader.start()
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # drained: passed-through output never blocks
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any("target.trains" in ln for ln in err_lines):
        time.sleep(0.2)
    assert any("target.trains" in ln for ln in err_lines), "".join(err_lines)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert any("healthy_mlp" in " ".join(c.cmdline()) for c in children)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    reader.join(timeout=10)
    err = "".join(err_lines)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    data = __import__("json").loads(report.read_text())
    assert "interrupted" in data["note"]
    # healthy_mlp has nothing to find, and the walk was cut short before any leaf: inconclusive,
    # with the partial path that was measured.
    assert data["verdict"] == "inconclusive", data["path"]
    assert data["first_departure"] is None and data["conclusion"] is None
    assert data["path"] and data["path"][0]["node"] == "target.trains"
    gone = psutil.wait_procs(children, timeout=10)[1]
    assert not gone, f"launched target still running: {gone}"


def test_negative_pid() -> None:
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--pid", "-1")
    assert_one_line_error(proc, 2, "positive process id")


def test_report_path_that_cannot_be_written_fails_before_measuring(tmp_path: Path) -> None:
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(tmp_path / "no" / "r.json"),
                          "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "no such directory")


def test_percent_h_in_the_report_path_is_this_hosts_name(tmp_path: Path) -> None:
    import socket

    # The path is expanded before it is checked: the error names the host's own file.
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(tmp_path / "no" / "r-%h.json"),
                          "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "no such directory")
    assert f"r-{socket.gethostname()}.json" in proc.stderr and "%h" not in proc.stderr


def test_budget_must_be_finite() -> None:
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--budget", "inf", "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "--budget")


def test_saved_report_missing_fields(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text('{"playbook": "slow-training", "verdict": "departure", "path": [{"node": "a", "status": "pass"}]}')
    proc = run_fieldguide("report", str(bad))
    assert_one_line_error(proc, 2, "is not a fieldguide JSON report")


def test_a_malformed_playbook_of_the_users_is_skipped_in_the_listing(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("id: [\n")
    proc = run_fieldguide("playbooks", env={"FIELDGUIDE_PLAYBOOKS": str(tmp_path)})
    assert proc.returncode == 0
    assert "slow-training" in proc.stdout
    assert "skipped a malformed playbook" in proc.stderr and "broken.yaml" in proc.stderr


def test_local_with_a_playbook_that_needs_a_process_is_refused_with_the_one_that_measures_the_machine(
        tmp_path: Path) -> None:
    report = tmp_path / "local.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--local", "--report", str(report))
    assert proc.returncode == 2 and "--playbook node-check" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not report.exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["watch"], "exactly one target"),
    (["watch", "--pid", "1", "--", "python", "x.py"], "exactly one target"),
    (["watch", "--duration", "-5", "--", "python", "x.py"], "--duration"),
    (["watch", "--duration", "inf", "--", "python", "x.py"], "--duration"),
])
def test_watch_bad_usage_is_one_line(args: list[str], needle: str) -> None:
    assert_one_line_error(run_fieldguide(*args), 2, needle)


def test_watch_report_dir_that_is_a_file_fails_before_anything_starts(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    proc = run_fieldguide("watch", "--report-dir", str(taken), "--", sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "--report-dir", "not a directory")


def test_watch_rules_that_are_not_rules_fail_with_file_and_line(tmp_path: Path) -> None:
    rules = tmp_path / "w.yaml"
    rules.write_text("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals: 3\n")
    proc = run_fieldguide("watch", "--rules", str(rules), "--report-dir", str(tmp_path / "out"), "--",
                          sys.executable, "-c", "pass")
    assert_one_line_error(proc, 2, "w.yaml:5", "signals")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_watch_ends_its_job_and_says_why_in_its_last_event(tmp_path: Path, sig: int) -> None:
    """Ctrl-C (or SIGTERM from a closed pane) is how a watch usually ends: the launched job is
    ended, the last event says why, and the status says whether the job departed (0: never)."""
    out = tmp_path / "w"
    proc = subprocess.Popen([*FIELDGUIDE, "watch", "--no-tui", "--report-dir", str(out), "--",
                             sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, NO_COLOR="1"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (out / "events.jsonl").exists():
        time.sleep(0.1)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    events = [__import__("json").loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "start" and events[-1]["kind"] == "end"
    assert events[-1]["why"].startswith("interrupted by") and events[-1]["departures"] == 0
    assert "end        interrupted by" in stdout
    assert not psutil.wait_procs(children, timeout=10)[1], "the launched job is still running"


def test_a_watch_whose_stdout_is_closed_keeps_writing_its_events(tmp_path: Path) -> None:
    """`fieldguide watch --no-tui ... | head -1`: no traceback when the pipe closes; events.jsonl goes on."""
    out = tmp_path / "w"
    proc = subprocess.Popen([*FIELDGUIDE, "watch", "--no-tui", "--report-dir", str(out), "--",
                             sys.executable, "-c", "import time\nwhile True: time.sleep(0.1)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert "watching" in proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert "Traceback" not in stderr and proc.returncode == 0, stderr
    assert (out / "events.jsonl").read_text().splitlines()[-1].count('"kind": "end"') == 1


def test_a_report_name_over_name_max_is_one_line_and_status_2(tmp_path: Path) -> None:
    """Issue 33: a --report name over NAME_MAX gave a traceback."""
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(tmp_path / ("a" * 300 + ".json")),
                          "--pid", str(os.getpid()))
    assert_one_line_error(proc, 2, "--report", "File name too long")


def test_report_o_makes_no_directories(tmp_path: Path) -> None:
    """Issue 33: `report -o a/b/c.md` made the missing directories, where `diagnose --report` refuses."""
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"verdict": "clean", "playbook": "slow-training", "path": [], "first_departure": None,
                                 "conclusion": "device.compute_bound"}))
    proc = run_fieldguide("report", str(saved), "-o", str(tmp_path / "a" / "b" / "c.md"))
    assert_one_line_error(proc, 2, "no such directory")
    assert not (tmp_path / "a").exists()
