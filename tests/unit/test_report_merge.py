"""`fieldguide report merge`: reports of many nodes and ranks as one view, on constructed reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fieldguide.frontends.cli import main
from fieldguide.report.merge import expand_report_path, merge_command


def rank(n: int, host: str, step_ms: float | None, collective_wait: float | None, data_wait: float = 0.02,
         verdict: str = "") -> dict[str, Any]:
    own = None if step_ms is None or collective_wait is None else step_ms * (1 - collective_wait)
    return {"rank": n, "pid": 100 + n, "host": host, "steps": 20, "step_ms": step_ms, "data_wait": data_wait,
            "collective_wait": collective_wait, "producer_cpu": 0.05, "verdict": verdict, "own_ms": own}


def report(*, ranks: list[dict[str, Any]] | None = None, cause: str | None = None, measured: dict[str, Any] | None = None,
           conclusion: str | None = None, verdict: str | None = None, path: list[dict[str, Any]] | None = None,
           host: str | None = None) -> dict[str, Any]:
    verdict = verdict or ("departure" if cause else "clean" if conclusion else "inconclusive")
    data: dict[str, Any] = {
        "fieldguide_version": "0.1.0", "created": "2026-12-02T12:00:00Z", "playbook": "slow-training",
        "target": {"kind": "launch", "pid": 4242, "cmdline": ["python", "-m", "torch.distributed.run", "train.py"]},
        "environment": {"python": "3.11.7", "torch": "2.13.0", "cuda": None, "gpus": [], "variables": {}},
        "verdict": verdict, "conclusion": conclusion, "path": path or [],
        "first_departure": None if not cause else {
            "node": "dist.ranks", "cause": cause, "title": f"title of {cause}", "measured": measured or {},
            "expected": "...", "summary": "...", "fix": [], "verify": "..."},
    }
    if host:
        data["environment"]["host"] = host
    if ranks:
        data["ranks"] = ranks
    return data


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def two_nodes(tmp_path: Path) -> list[Path]:
    """Node a: rank 1 straggles (its input), rank 0 waits for it; node b: two ranks that wait alike."""
    a = report(cause="dist.straggler", measured={"slowest_rank": 1, "own_work_ratio": 3.9},
               ranks=[rank(0, "node-a", 245.0, 0.84, verdict="waits 84% of its step in collectives"),
                      rank(1, "node-a", 245.0, 0.37, data_wait=0.48, verdict="slowest own work: input-bound")])
    b = report(conclusion="device.compute_bound", ranks=[rank(2, "node-b", 245.0, 0.80), rank(3, "node-b", 245.0, 0.81)])
    return [write(tmp_path, "report-node-a.json", a), write(tmp_path, "report-node-b.json", b)]


def test_the_straggler_is_the_rank_the_departed_nodes_evidence_names(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # As a walk writes it: measured has only what the expectation read; the rank is in the evidence.
    a = report(cause="dist.straggler", measured={"own_work_ratio": 4.8, "others_wait_fraction": 0.82},
               ranks=[rank(0, "a", 143.0, 0.82), rank(1, "a", 143.0, 0.13, data_wait=0.69)])
    a["evidence"] = {"dist.ranks": {"values": {"slowest_rank": 1, "own_work_ratio": 4.8}}}
    b = report(cause="dist.straggler", measured={}, ranks=[rank(2, "b", 143.0, 0.8),
                                                          rank(3, "b", 143.0, 0.8, verdict="slowest own work: x")])
    out = merged_json([write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)], capsys)
    assert [r["cause"] for r in out["ranks"]] == ["", "dist.straggler", "", "dist.straggler"]
    assert (out["straggler"]["host"], out["straggler"]["rank"]) == ("a", 1)


def merged_json(paths: list[Path], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["report", "merge", *map(str, paths), "--format", "json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_two_nodes_one_straggler_rank(two_nodes: list[Path], capsys: pytest.CaptureFixture[str]) -> None:
    out = merged_json(two_nodes, capsys)
    assert set(out) >= {"fieldguide_version", "created", "merged_from", "nodes", "ranks", "straggler", "verdict", "causes"}
    assert out["merged_from"] == [str(p) for p in two_nodes]
    assert out["verdict"] == "departure"
    assert [(n["host"], n["verdict"], n["ranks"]) for n in out["nodes"]] == [
        ("node-a", "departure", 2), ("node-b", "clean", 2)]
    assert [(r["host"], r["rank"]) for r in out["ranks"]] == [("node-a", 0), ("node-a", 1), ("node-b", 2), ("node-b", 3)]
    # The straggler departure belongs to the rank it names; the others only wait.
    assert [r["cause"] for r in out["ranks"]] == ["", "dist.straggler", "", ""]
    assert [r["conclusion"] for r in out["ranks"]] == [None, None, "device.compute_bound", "device.compute_bound"]
    s = out["straggler"]
    assert (s["host"], s["rank"], s["named_by"]) == ("node-a", 1, [str(two_nodes[0])])
    assert s["own_work_ratio"] == pytest.approx(154.35 / 46.55, rel=0.01)  # own ms vs the median of the others
    assert s["others_wait_fraction"] == pytest.approx(0.80)
    [cause] = out["causes"]
    assert (cause["cause"], cause["hosts"], cause["ranks"]) == ("dist.straggler", ["node-a"],
                                                                [{"host": "node-a", "rank": 1}])


def test_a_straggler_on_another_node_is_found_by_the_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Each node alone looks even (both its ranks wait alike); across the job node b's rank 3 is slow.
    a = report(conclusion="device.compute_bound", ranks=[rank(0, "a", 200.0, 0.7), rank(1, "a", 200.0, 0.7)])
    b = report(conclusion="device.compute_bound", ranks=[rank(2, "b", 200.0, 0.7), rank(3, "b", 200.0, 0.1)])
    out = merged_json([write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)], capsys)
    assert out["verdict"] == "departure"
    assert (out["straggler"]["host"], out["straggler"]["rank"], out["straggler"]["named_by"]) == ("b", 3, [])
    assert out["straggler"]["found_by_merge"] is True
    assert [c["cause"] for c in out["causes"]] == ["dist.straggler"]


def test_reports_without_ranks_are_one_rank_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = [{"node": "input.data-wait", "status": "depart",
              "measured": {"step_ms_median": 52.0, "data_wait_fraction": 0.9}}]
    a = report(cause="input.waiting", path=steps, host="gpu-01")
    b = report(conclusion="device.compute_bound",
               path=[{"node": "input.data-wait", "status": "pass", "measured": {"step_ms_median": 30.0}}])
    paths = [write(tmp_path, "a.json", a), write(tmp_path, "node-b.json", b)]
    out = merged_json(paths, capsys)
    assert [(n["host"], n["ranks"], n["step_ms"]) for n in out["nodes"]] == [("gpu-01", 1, 52.0), ("node-b", 1, 30.0)]
    assert [(r["host"], r["cause"], r["data_wait"]) for r in out["ranks"]] == [
        ("gpu-01", "input.waiting", 0.9), ("node-b", "", None)]
    assert out["straggler"] is None  # no collective waits measured: nothing to compare
    assert out["verdict"] == "departure"
    assert [(c["cause"], c["hosts"]) for c in out["causes"]] == [("input.waiting", ["gpu-01"])]


def test_all_clean_is_clean_and_any_inconclusive_is_inconclusive(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    clean = report(conclusion="device.compute_bound")
    paths = [write(tmp_path, "a.json", clean), write(tmp_path, "b.json", clean)]
    assert merged_json(paths, capsys)["verdict"] == "clean"
    paths.append(write(tmp_path, "c.json", report()))
    assert merged_json(paths, capsys)["verdict"] == "inconclusive"


def test_markdown_and_html(two_nodes: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "merge", *map(str, two_nodes)]) == 0  # md by default
    md = capsys.readouterr().out
    assert "| host | node rank | rank | pid | verdict | cause | step ms | own ms | data wait | collective wait |" in md
    assert "| node-a | n/a | 1 | 101 | slowest own work: input-bound | dist.straggler | 245 | 154 | 48% | 37% |" in md
    assert "Straggler: rank 1 on node-a" in md
    assert "| node-b | n/a | 2 | 102 | clean | device.compute_bound | 245 |" in md
    out = tmp_path / "out" / "job.html"
    assert main(["report", "merge", *map(str, two_nodes), "--format", "html", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert "<td class='k'>node-b</td>" in page and "dist.straggler" in page


def test_html_escapes_what_reports_say(tmp_path: Path) -> None:
    a = report(conclusion="device.compute_bound", ranks=[rank(0, "<b>evil</b>", 10.0, 0.1, verdict="<script>x</script>"),
                                                          rank(1, "h", 10.0, 0.1)])
    b = report(conclusion="device.compute_bound")
    out = tmp_path / "job.html"
    assert merge_command([write(tmp_path, "a.json", a), write(tmp_path, "b&.json", b)], "html", out) == 0
    page = out.read_text(encoding="utf-8")
    assert "<script>" not in page and "<b>evil" not in page
    assert "&lt;b&gt;evil&lt;/b&gt;" in page and "b&amp;" in page


@pytest.mark.parametrize(("make", "needle"), [
    (lambda d: [], "two or more"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound"))], "two or more"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound")), d / "missing.json"], "no such report"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound")), write(d, "b.json", {"x": 1})],
     "not a fieldguide JSON report"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound")), write(d, "b.json", [1, 2])],
     "not a fieldguide JSON report"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound")), (d / "b.json")], "not JSON"),
    (lambda d: [write(d, "a.json", report(conclusion="device.compute_bound"))] * 2, "given twice"),
])
def test_bad_input_is_one_line_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any,
                                            needle: str) -> None:
    paths = make(tmp_path)
    if paths and not paths[-1].exists() and paths[-1].name == "b.json":
        paths[-1].write_text("{not json", encoding="utf-8")
    assert main(["report", "merge", *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("fieldguide: ")


def test_a_report_without_a_playbook_is_not_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = report(conclusion="device.compute_bound")
    del broken["playbook"]
    paths = [write(tmp_path, "a.json", report(conclusion="device.compute_bound")), write(tmp_path, "b.json", broken)]
    assert main(["report", "merge", *map(str, paths)]) == 2
    assert "(no playbook)" in capsys.readouterr().err


def test_expand_report_path() -> None:
    assert expand_report_path(Path("reports/report-%h.json"), host="gpu-07") == Path("reports/report-gpu-07.json")
    assert expand_report_path(Path("r/%h/100%%-%h.md"), host="n1") == Path("r/n1/100%-n1.md")
    assert expand_report_path(Path("plain.json")) == Path("plain.json")
    assert "%h" not in str(expand_report_path(Path("report-%h.json")))


def test_ranks_that_all_wait_are_no_straggler_across_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Own work 1.4x by noise, but the slowest rank waits nearly as much as the others (a gap of 16
    # points): communication-bound, as the dist.ranks node judges it, not a straggler.
    a = report(conclusion="device.compute_bound", ranks=[rank(0, "a", 200.0, 0.60), rank(1, "a", 200.0, 0.62)])
    b = report(conclusion="device.compute_bound", ranks=[rank(2, "b", 200.0, 0.61), rank(3, "b", 200.0, 0.44)])
    out = merged_json([write(tmp_path, "a.json", a), write(tmp_path, "b.json", b)], capsys)
    assert out["straggler"] is None and out["causes"] == []


def with_job(data: dict[str, Any], world: int, run_id: str = "job-1", master: str = "10.0.0.1:29500",
             node: int | None = None) -> dict[str, Any]:
    data["job"] = {"id": run_id, "master": master, "world_size": world}
    for r in data.get("ranks") or []:
        r["node_rank"] = node
    return data


@pytest.mark.parametrize(("make_b", "needle"), [
    (lambda: {**report(conclusion="device.compute_bound", ranks=[rank(2, "b", 100.0, 0.1), rank(3, "b", 100.0, 0.1)]),
              "playbook": "oom"}, "a slow-training report and"),
    (lambda: with_job(report(conclusion="device.compute_bound", ranks=[rank(2, "b", 100.0, 0.1),
                                                                       rank(3, "b", 100.0, 0.1)]), 4, run_id="job-2"),
     "different jobs (run id job-1 and job-2)"),
    (lambda: with_job(report(conclusion="device.compute_bound", ranks=[rank(2, "b", 100.0, 0.1),
                                                                       rank(3, "b", 100.0, 0.1)]), 4,
                      master="10.0.0.9:29500"), "different jobs (rendezvous"),
    (lambda: with_job(report(conclusion="device.compute_bound", ranks=[rank(1, "b", 100.0, 0.1),
                                                                       rank(3, "b", 100.0, 0.1)]), 4),
     "both hold rank 1"),
    (lambda: with_job(report(conclusion="device.compute_bound", ranks=[rank(2, "b", 100.0, 0.1),
                                                                       rank(3, "b", 100.0, 0.1)]), 6),
     "the job has 6 ranks and these reports hold 4: ranks 4, 5 are missing"),
])
def test_reports_that_are_not_one_jobs_nodes_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        make_b: Any, needle: str) -> None:
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.1), rank(1, "a", 100.0, 0.1)]), 4)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", make_b()))]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_one_jobs_nodes_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.1), rank(1, "a", 100.0, 0.1)]),
                 4, node=0)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(2, "b", 100.0, 0.1), rank(3, "b", 100.0, 0.1)]),
                 4, node=1)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b)),
                 "--format", "json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["verdict"] == "clean" and merged["slow_node"] is None and merged["straggler"] is None


def test_a_slow_node_is_named_first_with_its_ranks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Node 1's two ranks each do 34 ms of their own work a step; node 0's do 5 ms and wait for them.
    # Each node alone looks even: two equally slow ranks are no straggler among themselves.
    a = with_job(report(cause="dist.waits_on_remote_ranks", ranks=[rank(0, "h", 40.0, 0.875), rank(1, "h", 40.0, 0.88)]),
                 4, node=0)
    b = with_job(report(cause="input.cpu_bound", ranks=[rank(2, "h", 40.0, 0.15), rank(3, "h", 40.0, 0.16)]), 4, node=1)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b)),
                 "--format", "json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    node = merged["slow_node"]
    assert node["node"] == "node 1" and node["ranks"] == [2, 3] and node["own_work_ratio"] > 6
    assert merged["causes"][0]["cause"] == "dist.slow_node"
    assert {r["rank"] for r in merged["causes"][0]["ranks"]} == {2, 3}
    assert main(["report", "merge", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--format", "md"]) == 0
    text = capsys.readouterr().out
    assert text.index("Slow node: node 1 (h), ranks 2, 3") < text.index("dist.waits_on_remote_ranks")



def test_a_rank_one_point_four_times_slower_whose_peers_wait_is_named(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # One rank per node: rank 1's own work 1.4x rank 0's, which waits 28 points more than it does.
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 217.0, 0.30)]), 2, node=0)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(1, "b", 217.0, 0.02)]), 2, node=1)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b)),
                 "--format", "json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["straggler"]["rank"] == 1 and merged["slow_node"]["ranks"] == [1]


def test_a_rank_one_point_three_times_slower_whose_peers_wait_is_named(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # Rank 1's own work 95 ms a step against rank 0's 73 (1.30x): rank 0 waits 22 points more of
    # its step than rank 1, and rank 1 waits a fifth as much as it does.
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.27)]), 2, node=0)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(1, "b", 100.0, 0.05)]), 2, node=1)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b)),
                 "--format", "json"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert merged["straggler"]["rank"] == 1 and merged["straggler"]["own_work_ratio"] == pytest.approx(1.301, abs=0.001)
    assert merged["slow_node"]["ranks"] == [1] and merged["slow_node"]["slowest_wait_ratio"] == pytest.approx(0.185, abs=0.001)


@pytest.mark.parametrize(("world", "needle"), [
    (10**12, "says the job has 1000000000000 ranks: not a world size"),
    (0, "says the job has 0 ranks: not a world size"),
    (2**20 + 1, "not a world size (1 to 1048576)"),
])
def test_a_crafted_world_size_is_refused_at_once_and_small(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           world: int, needle: str) -> None:
    """Issue 33 H4: `world_size: 10**12` built set(range(10**12)) and took the machine's memory."""
    import resource
    import time

    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.1)]), world)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(1, "b", 100.0, 0.1)]), world)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b))]) == 2
    assert time.monotonic() - started < 2.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KB: under 200 MB more
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1, err


def test_a_large_world_with_few_ranks_names_the_first_missing_without_building_the_range(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.1)]), 2**20)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(1, "b", 100.0, 0.1)]), 2**20)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b))]) == 2
    err = capsys.readouterr().err
    assert "the job has 1048576 ranks and these reports hold 2: ranks 2, 3, 4, 5, 6, 7, 8, 9, ... are missing" in err


def test_a_rank_outside_the_world_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = with_job(report(conclusion="device.compute_bound", ranks=[rank(0, "a", 100.0, 0.1)]), 2)
    b = with_job(report(conclusion="device.compute_bound", ranks=[rank(7, "b", 100.0, 0.1)]), 2)
    assert main(["report", "merge", str(write(tmp_path, "a.json", a)), str(write(tmp_path, "b.json", b))]) == 2
    assert "holds rank 7, outside the job's 2 ranks" in capsys.readouterr().err


def test_the_same_walk_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33: merging one single-process report twice (two copies) gave "2 reports, 2 ranks"."""
    data = report(conclusion="device.compute_bound")
    data.update(created="2026-12-07T03:00:00Z", target={"kind": "launch", "pid": 7, "cmdline": []},
                environment={"host": "n1"})
    assert main(["report", "merge", str(write(tmp_path, "a.json", data)), str(write(tmp_path, "b.json", data))]) == 2
    assert "are the same walk" in capsys.readouterr().err
