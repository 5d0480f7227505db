"""Output a script can read: `--json` puts the JSON report alone on stdout (the summary on stderr),
`--report -` means stdout, a report suffix that names no format is refused, and every report
carries `schema_version` and matches the JSON Schema shipped in the package."""

from __future__ import annotations

import json
import signal
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

import fieldguide.frontends.headless as headless
import fieldguide.walk.session as session_module
from fieldguide.frontends.cli import main
from fieldguide.report.findings import SCHEMA_VERSION, environment_from, findings_from_walk


def report_schema() -> dict[str, Any]:
    text = resources.files("fieldguide.report").joinpath("schema/report.schema.json").read_text()
    return dict(json.loads(text))  # tests/conftest.py's check_report reads the same file


class Ended:
    kind, pid = "launch", 4242

    def close(self) -> None:
        pass


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch, walk_with: Any) -> None:
    """`diagnose` walks a departure without launching anything."""
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8}})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [])
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 4242, "cmdline": ["python", "train.py"]}, env)
    monkeypatch.setattr(session_module, "open_target", lambda *a, **k: Ended())
    monkeypatch.setattr(session_module, "Session", lambda *a, **k: SimpleNamespace())
    monkeypatch.setattr(headless, "walk_off_main_thread", lambda *a, **k: (findings, False))
    from fieldguide.frontends.cli import _interrupt

    previous, count = signal.getsignal(signal.SIGINT), _interrupt.count
    yield
    signal.signal(signal.SIGINT, previous)
    _interrupt.count = count  # the walk marked it over: signals after it would only wait


@pytest.mark.parametrize("how", [["--json"], ["--report", "-"], ["--report", "/dev/stdout"]])
def test_stdout_holds_the_json_report_alone(walked: None, capsys: pytest.CaptureFixture[str], how: list[str]) -> None:
    code = main(["diagnose", "--playbook", "slow-training", *how, "--", "python", "train.py"])
    out, err = capsys.readouterr()
    data = json.loads(out)  # nothing else on stdout
    assert code == 1 and data["verdict"] == "departure" and data["schema_version"] == SCHEMA_VERSION
    assert "input.waiting" in err  # the summary, on stderr


def test_json_and_a_report_file_both(walked: None, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["diagnose", "--playbook", "slow-training", "--json", "--report", str(tmp_path / "r.md"),
                 "--", "python", "train.py"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "departure"
    assert (tmp_path / "r.md").read_text().startswith("# fieldguide report")


def test_report_dash_in_another_format(walked: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--playbook", "slow-training", "--report", "-", "--format", "md",
                 "--", "python", "train.py"]) == 1
    assert capsys.readouterr().out.startswith("# fieldguide report")


def test_a_suffix_that_names_no_format_is_refused_before_the_walk(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    code = main(["diagnose", "--playbook", "slow-training", "--report", str(tmp_path / "x.txt"),
                 "--", "python", "-c", "pass"])
    err = capsys.readouterr().err
    assert code == 2 and "the suffix .txt names no report format" in err and len(err.strip().splitlines()) == 1


def test_reports_match_the_shipped_schema(walk_with: Any, small_walk_with: Any) -> None:
    schema = report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [])
    for walk in (walk_with({"loop.steps": {"data_wait_fraction": 0.8}})[0], walk_with({})[0],
                 small_walk_with({})[0]):
        data = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]}, env).to_json()
        jsonschema.validate(data, schema)
    broken = {**data, "verdict": "maybe"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
