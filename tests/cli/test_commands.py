"""The small commands: playbooks, explain, report, --version."""

from __future__ import annotations

import json
from pathlib import Path

from fieldguide import __version__
from tests.conftest import run_fieldguide


def test_playbooks_lists_slow_training_with_its_purpose() -> None:
    proc = run_fieldguide("playbooks")
    assert proc.returncode == 0
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("slow-training"))
    assert "slower than it should" in line


def test_version() -> None:
    proc = run_fieldguide("--version")
    assert proc.stdout.strip() == f"fieldguide {__version__}"


def test_explain_prints_the_cause_page() -> None:
    proc = run_fieldguide("explain", "input.cpu_bound")
    assert proc.returncode == 0
    for section in ("Why it costs", "Fix", "Verify", "persistent_workers"):
        assert section in proc.stdout


def test_explain_keeps_a_steps_code_inside_its_numbered_step() -> None:
    """The page as the reports render it (report/fixsteps.py): step 1's code block is indented
    under it, and step 2 is numbered 2, not restarted after the block."""
    lines = run_fieldguide("explain", "host.debug_mode").stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("1. Remove the switch"))
    second = next(i for i, line in enumerate(lines) if line.startswith("2. Replace"))
    code = [line for line in lines[first + 1:second] if "set_detect_anomaly" in line]
    assert code and all(line.startswith("   ") for line in code)


def test_explain_off_a_terminal_is_the_page_unwrapped_and_unpadded() -> None:
    """`explain X | cat`, `> page.md`: the Markdown as it is, no line padded with spaces or
    broken by fieldguide (it had padded 31 of 41 lines to 80 columns)."""
    out = run_fieldguide("explain", "host.blocking_io").stdout
    lines = out.splitlines()
    assert lines[0] == "# host.blocking_io: The step loop blocks on file or network I/O"
    assert not [line for line in lines if line != line.rstrip()]
    assert max(map(len, lines)) > 100  # a paragraph is one line, whatever the width
    listed = run_fieldguide("explain", "--list").stdout.splitlines()
    assert any(line.startswith("host.blocking_io ") and "file or network I/O" in line for line in listed)
    assert not [line for line in listed if line != line.rstrip()]


def test_report_renders_a_saved_json_report(tmp_path: Path) -> None:
    from fieldguide.playbook import find_playbook
    from fieldguide.report import findings_from_walk
    from fieldguide.walk.engine import Walk
    from tests.unit.fg_fakes import (  # a real walk over constructed measurements
        FakeMeasure,
        healthy_values,
    )

    playbook = find_playbook("slow-training")
    values = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "data_wait_fraction": 0.7}
    values["stacks.sample"] = {**values["stacks.sample"], "producer_cpu_fraction": 0.9, "data_wait_fraction": 0.7}
    walk = Walk(playbook, lambda: {"process", "agent"}, FakeMeasure(values))
    walk.run()
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]}, {})
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(findings.to_json()))
    proc = run_fieldguide("report", str(saved), "--format", "md")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# fieldguide report: Slow training")
    assert "`input.cpu_bound`" in proc.stdout
    out = tmp_path / "r.html"
    proc = run_fieldguide("report", str(saved), "--format", "html", "--output", str(out))
    assert proc.returncode == 0 and "<h2>" in out.read_text()


def test_explain_a_healthy_leaf_names_its_playbook() -> None:
    proc = run_fieldguide("explain", "device.compute_bound")
    assert proc.returncode == 0, proc.stderr
    assert "device.compute_bound" in proc.stdout and "slow-training" in proc.stdout
    assert "Steps are spent computing" in " ".join(proc.stdout.split())


def test_explain_an_unknown_id_lists_causes_and_leaves() -> None:
    from tests.cli.test_bad_input import assert_one_line_error

    proc = run_fieldguide("explain", "input.nope")
    assert_one_line_error(proc, 2, "'input.nope'", "input.cpu_bound", "device.compute_bound")
