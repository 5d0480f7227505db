"""The files a walk leaves for the usual viewers: a stack window as a speedscope profile, gathered
from the evidence once each, copied beside the report, listed and linked in every format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fieldguide.probes.speedscope import keep_speedscope, speedscope_profile
from fieldguide.report.artifacts import gather, place, tlparse_command
from fieldguide.report.findings import environment_from, findings_from_walk
from fieldguide.report.render import render

RAW = (
    'process 10:"python train.py";thread (10): MainThread;<module> (train.py:40);step (train.py:20);'
    "backward (torch/_tensor.py:520) 30\n"
    'process 10:"python train.py";thread (10): MainThread;<module> (train.py:40);next (loader.py:9) 10\n'
    'process 10:"python train.py";process 11:"python train.py";thread (11): MainThread;'
    "loop (worker.py:3);read (data.py:7) 12\n"
    "garbage line\n"
)


def test_a_raw_window_becomes_one_sampled_profile_per_thread() -> None:
    profile = speedscope_profile(RAW, "py-spy, pid 10")
    assert profile["$schema"] == "https://www.speedscope.app/file-format-schema.json"
    frames = profile["shared"]["frames"]
    main, worker = profile["profiles"]  # the busiest first
    assert main["name"] == "pid 10 MainThread" and worker["name"] == "pid 11 MainThread"
    assert main["weights"] == [30, 10] and main["endValue"] == 40 and worker["weights"] == [12]
    assert main["unit"] == "none"  # samples, where the rate is not known
    assert [frames[i] for i in main["samples"][0]] == [
        {"name": "<module>", "file": "train.py", "line": 40}, {"name": "step", "file": "train.py", "line": 20},
        {"name": "backward", "file": "torch/_tensor.py", "line": 520}]
    assert frames.count({"name": "<module>", "file": "train.py", "line": 40}) == 1  # frames shared


OWN = (
    'process 10:"python train.py";thread (10): MainThread;<module> (train.py:40);'
    "backward (/site-packages/fieldguide/agent/inside/capabilities/loop.py:267);"
    "backward (/x/_fieldguide_agent/capabilities/losses.py:50);run_backward (torch/autograd/graph.py:8) 40\n"
    'process 10:"python train.py";thread (12): fieldguide-agent;serve (/x/_fieldguide_agent/core.py:200) 40\n'
    'process 10:"python train.py";thread (13): fieldguide-input-sampler;sample_input (/x/loop.py:330) 4\n'
)


def test_fieldguides_own_threads_and_wrapper_frames_are_not_in_the_users_profile() -> None:
    profile = speedscope_profile(OWN, "py-spy, pid 10", rate=100)
    [main] = profile["profiles"]
    frames = profile["shared"]["frames"]
    assert [frames[i]["name"] for i in main["samples"][0]] == ["<module>", "run_backward"]
    assert not any("fieldguide" in json.dumps(f) for f in frames)
    assert main["unit"] == "seconds" and main["weights"] == [0.4] and main["endValue"] == 0.4


def test_the_profile_holds_to_speedscopes_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parent / "data" / "speedscope-file-format-schema.json").read_text())
    jsonschema.validate(speedscope_profile(RAW, "py-spy, pid 10", rate=100), schema)
    jsonschema.validate(speedscope_profile(OWN, "py-spy, pid 10"), schema)


def test_an_empty_window_keeps_no_file(tmp_path: Path) -> None:
    assert keep_speedscope(tmp_path, "", "x", "stacks") is None and not list(tmp_path.iterdir())
    kept = keep_speedscope(tmp_path, RAW, "x", "stacks")
    assert kept is not None and json.loads(Path(kept["path"]).read_text())["profiles"]


def test_artifacts_are_gathered_once_with_the_torch_traces_tlparse_command(tmp_path: Path) -> None:
    trace = tmp_path / "r-torch-trace"
    trace.mkdir()
    (trace / "dedicated_log_torch_trace_ab.log").write_text("{}\n")
    spy = {"kind": "speedscope", "path": "/x/s.json", "open_with": "speedscope"}
    found = gather([{"artifacts": [spy]}, {"artifacts": [spy], "torch_trace": str(trace)}])
    assert [a["kind"] for a in found] == ["speedscope", "torch_trace"]
    log = trace / "dedicated_log_torch_trace_ab.log"
    assert found[1]["command"] == tlparse_command(log) == f"tlparse {log} -o {trace}/dedicated_log_torch_trace_ab-tlparse --overwrite"


def test_a_written_report_keeps_its_files_beside_it_and_links_them(tmp_path: Path, walk_with: Any) -> None:
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8}})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": None, "cpu_cores": 2, "nvml": "ok"}, [])
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]}, env)
    walk_dir = tmp_path / "walk"
    walk_dir.mkdir()
    kept = keep_speedscope(walk_dir, RAW, "x", "stacks-1")
    assert kept is not None
    findings.artifacts = [kept]
    report = tmp_path / "out" / "r.json"
    report.parent.mkdir()
    placed = place(findings, report)
    copy = tmp_path / "out" / "r-artifacts" / "stacks-1.speedscope.json"
    assert placed.artifacts[0]["path"] == str(copy) and copy.read_text() == Path(kept["path"]).read_text()
    assert (copy.parent.stat().st_mode & 0o777) == 0o700
    assert place(placed, report).artifacts == placed.artifacts  # already beside it: left where it is
    assert json.loads(render(placed, "json"))["artifacts"][0]["path"] == str(copy)
    markdown, html = render(placed, "md"), render(placed, "html")
    # Links relative to the report: `scp -r report.html r-artifacts/ laptop:` keeps every one.
    assert "## Files to open" in markdown and "(<r-artifacts/stacks-1.speedscope.json>)" in markdown
    assert "<a href='r-artifacts/stacks-1.speedscope.json'>" in html and "file://" not in html


def test_the_walks_folder_goes_once_a_written_report_keeps_its_copies() -> None:
    from types import SimpleNamespace

    from fieldguide.walk.runner import ProbeRunner

    runner = ProbeRunner(SimpleNamespace(pid=None), budget=10.0)
    folder = runner.artifacts_dir()
    (folder / "stacks.speedscope.json").write_text("{}")
    assert runner.artifacts_dir() == folder  # one folder per walk
    runner.discard_artifacts()
    assert not folder.exists()
    again = runner.artifacts_dir()  # a later window (the TUI re-measures) gets a fresh one
    assert again != folder and again.is_dir()
    runner.discard_artifacts()


def test_a_folder_or_links_planted_beside_the_report_are_never_written_through(tmp_path: Path,
                                                                              walk_with: Any) -> None:
    """Issue 33 H2: a planted `<report>-artifacts` link made root write the artifacts elsewhere,
    planted file links made it overwrite a root-only file, and placing twice lost the report."""
    import os

    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8}})
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]},
                                  environment_from({}, []))
    walk_dir = tmp_path / "walk"
    walk_dir.mkdir()
    kept = keep_speedscope(walk_dir, RAW, "x", "stacks-1")
    assert kept is not None
    findings.artifacts = [kept]
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "r-artifacts").symlink_to(elsewhere)  # a folder link planted at the name it derives
    placed = place(findings, out / "r.json")
    copy = Path(placed.artifacts[0]["path"])
    assert list(elsewhere.iterdir()) == [] and copy.parent.parent == out and not copy.parent.is_symlink()
    assert place(placed, out / "r.json").artifacts == placed.artifacts  # placing twice: idempotent
    # A file link planted inside a folder of ours is replaced, its target untouched.
    secret = tmp_path / "root-only"
    secret.write_text("keep")
    secret.chmod(0o600)
    own = out / "s-artifacts"
    own.mkdir(mode=0o700)
    (own / "stacks-1.speedscope.json").symlink_to(secret)
    again = place(findings, out / "s.json")
    assert secret.read_text() == "keep"
    assert Path(again.artifacts[0]["path"]) == own / "stacks-1.speedscope.json"
    assert not os.path.islink(own / "stacks-1.speedscope.json")


@pytest.mark.parametrize("href", ["javascript:alert(1)", "../../etc/passwd", "/etc/passwd", "https://evil.example/x"])
def test_a_saved_reports_hostile_href_is_never_a_link(href: str) -> None:
    """A report read back is no more trusted than the job: an href that leaves the report's folder
    or names a scheme links the file's own path (file://), never the href."""
    from fieldguide.report.sections import _link

    link = _link({"kind": "speedscope", "path": "/tmp/x/stacks.json", "href": href})
    assert link == "file:///tmp/x/stacks.json"
