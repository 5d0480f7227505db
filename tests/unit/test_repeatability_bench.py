"""benchmarks/repeatability.py's pure parts: what a report said, the counting, the one-verdict
rule, the match against a declaration, and the table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("repeatability_bench", ROOT / "benchmarks" / "repeatability.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


rb = _load()
TCC = rb.TOO_CLOSE


@pytest.mark.parametrize(("data", "label"), [
    (None, "no report"),
    ({"verdict": "departure", "first_departure": {"cause": "host.blocking_io"}}, "host.blocking_io"),
    ({"verdict": "departure", "first_departure": {}}, "departure without a cause"),
    ({"verdict": "clean", "conclusion": "device.compute_bound"}, "clean"),
    ({"verdict": "inconclusive", "path": [{"node": "a", "status": "pass"},
                                          {"node": "b", "status": "skip", "undecided": True}]}, TCC),
    ({"verdict": "inconclusive", "path": [{"node": "a", "status": "error"}]}, "inconclusive"),
    ({"verdict": "inconclusive"}, "inconclusive"),
])
def test_outcome_reads_one_label_from_a_report(data: dict[str, object] | None, label: str) -> None:
    assert rb.outcome(data) == label


def test_expected_label_from_a_declaration() -> None:
    assert rb.expected("host.loop_work", "departure") == "host.loop_work"
    assert rb.expected(None, "clean") == "clean"
    assert rb.expected(None, "inconclusive") == "inconclusive"


def test_counted_commonest_first_ties_in_order_seen() -> None:
    labels = ["clean", "host.overhead_bound", "clean", TCC, "clean", "host.overhead_bound"]
    assert rb.counted(labels) == [("clean", 3), ("host.overhead_bound", 2), (TCC, 1)]
    assert rb.counted([TCC, "a"]) == [(TCC, 1), ("a", 1)]
    assert rb.counted([]) == []
    assert rb.describe(["host.blocking_io"] * 5) == "host.blocking_io ×5"
    assert rb.describe(["clean"] * 4 + [TCC]) == f"clean ×4, {TCC} ×1"


@pytest.mark.parametrize(("labels", "one", "verdict"), [
    (["host.blocking_io"] * 5, True, "host.blocking_io"),
    (["host.blocking_io", TCC, "host.blocking_io"], True, "host.blocking_io"),
    ([TCC, TCC], True, TCC),
    (["clean"] * 5 + ["host.overhead_bound"], False, None),  # the 1 ms-step MLP of issue 32
    (["input.cpu_bound", "host.blocking_io"], False, None),
    (["clean", "no report"], False, None),
    (["inconclusive", TCC], True, "inconclusive"),
    ([], False, None),
])
def test_one_verdict_allows_only_too_close_to_call_besides_it(labels: list[str], one: bool,
                                                              verdict: str | None) -> None:
    assert rb.one_verdict(labels) is one
    assert rb.the_verdict(labels) == verdict


def test_matches_needs_the_declared_verdict_and_never_too_close_alone() -> None:
    assert rb.matches(["host.loop_work"] * 4 + [TCC], "host.loop_work")
    assert not rb.matches(["host.loop_work", "clean"], "host.loop_work")
    assert not rb.matches(["clean"] * 5, "host.loop_work")  # one verdict, the wrong one
    assert not rb.matches([TCC] * 3, "host.loop_work")
    assert rb.matches([TCC] * 3, "inconclusive")
    assert rb.matches(["clean", "clean"], "clean")


def test_table_one_row_per_workload_mode_and_condition() -> None:
    rows = [
        {"workload": "faults_io_over_input", "mode": "launch", "condition": "quiet", "want": "host.blocking_io",
         "labels": ["host.blocking_io"] * 4 + [TCC]},
        {"workload": "healthy_mlp", "mode": "launch", "condition": "busy", "want": "clean",
         "labels": ["clean"] * 4 + ["host.overhead_bound"]},
    ]
    lines = rb.table(rows).splitlines()
    assert lines[0].split() == ["workload", "mode", "condition", "outcomes", "one", "verdict", "declared"]
    assert lines[1].split() == ["faults_io_over_input", "launch", "quiet", "host.blocking_io", "×4,", "too",
                                "close", "to", "call", "×1", "yes", "yes"]
    assert "clean ×4, host.overhead_bound ×1" in lines[2] and lines[2].split()[-4:] == ["NO", "NO", "(want", "clean)"]
    # columns line up: every row's mode and verdict columns start where the header's do
    assert {line.index(" launch ") + 1 for line in lines[1:]} == {lines[0].index("mode")}
    assert lines[1].index(" yes ") + 1 == lines[0].index("one verdict")
    assert rb.summary(rows) == "2 rows, 10 walks: one verdict in 1/2, the declared one in 1/2"


def test_unknown_names_are_refused_before_any_walk(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--workloads", "nope"], ["--modes", "remote"], ["--conditions", "sideways"]):
        with pytest.raises(SystemExit) as info:
            rb.main(argv)
        assert info.value.code == 2
    assert "unknown condition sideways" in capsys.readouterr().err
