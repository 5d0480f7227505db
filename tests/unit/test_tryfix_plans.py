"""Trying a fix: the arms a cause's experiment plans, the overrides the agent reads, what the
arms' timings are read as, and how a report shows them."""

from __future__ import annotations

import pytest

from fieldguide.agent.inside.capabilities.overrides import parse_overrides
from fieldguide.experiments.experiment import Arms, Turn
from fieldguide.experiments.tryfix import plan, verdict
from fieldguide.playbook import find_playbook
from fieldguide.report.findings import Findings
from fieldguide.report.render import to_markdown


def causes() -> dict:
    return find_playbook("slow-training").causes | find_playbook("compile-regression").causes


def test_a_worker_sweep_goes_past_the_cores_but_not_without_limit() -> None:
    arms = plan(causes()["input.waiting"], cores=2)
    assert [arm.label for arm in arms] == ["num_workers=0", "num_workers=1", "num_workers=2", "num_workers=4",
                                           "num_workers=8"]
    assert arms[3].change == {"FIELDGUIDE_OVERRIDES": "dataloader.num_workers=4"}
    assert (arms[3].setting, arms[3].value) == ("num_workers", 4)
    assert [arm.label for arm in plan(causes()["input.waiting"], cores=1)] == [
        "num_workers=0", "num_workers=1", "num_workers=2", "num_workers=4"]


def test_an_environment_experiment_and_a_code_change() -> None:
    assert plan(causes()["compile.slower"]) == [("TORCH_COMPILE_DISABLE=1", {"TORCH_COMPILE_DISABLE": "1"}, None, None)]
    assert plan(causes()["compile.recompiles"]) == [("dynamic=true", {"FIELDGUIDE_OVERRIDES": "compile.dynamic=true"},
                                                     "dynamic", True)]
    why = plan(causes()["host.blocking_io"])
    assert isinstance(why, str) and "code change" in why


def test_every_cause_page_says_how_its_fix_is_tried_or_why_not() -> None:
    for cause in causes().values():
        assert cause.experiment is not None, cause.id


def test_overrides_parse_to_typed_values() -> None:
    assert parse_overrides("dataloader.num_workers=4, dataloader.pin_memory=true,debug.anomaly=false,x") == {
        "dataloader.num_workers": 4, "dataloader.pin_memory": True, "debug.anomaly": False}


def arms_of(per_turn: dict[str, list[float]]) -> Arms:
    turns = [Turn(arm=arm, started=0, ended=1, step_ms=[ms] * 10) for arm, values in per_turn.items() for ms in values]
    return Arms({arm: f"arm {arm}" for arm in per_turn}, turns)


def test_an_arm_helps_only_if_it_is_faster_in_every_round() -> None:
    rows = arms_of({"a": [100, 100, 100], "b": [60, 62, 58], "c": [90, 104, 95]}).rows()
    text, shape = verdict(rows, None)
    assert text.startswith("arm b helps: its steps take 60%") and shape is None
    noisy = arms_of({"a": [100, 100, 100], "b": [90, 104, 95]}).rows()
    assert verdict(noisy, None)[0].startswith("no difference beyond the rounds' spread")
    worse = arms_of({"a": [100, 100, 100], "b": [120, 130, 125]}).rows()
    assert verdict(worse, None)[0].startswith("no arm helps")


def test_a_worker_sweep_that_scales_is_told_from_one_that_plateaus() -> None:
    # Waiting (I/O latency): every worker added helps. CPU work on 2 cores: it stops at the cores.
    def sweep(*ms: float) -> list[dict]:
        rows = arms_of({"a": [140] * 3, **{k: [m] * 3 for k, m in zip("bcdef", ms, strict=False)}}).rows()
        for row, workers in zip(rows[1:], (0, 1, 2, 4, 8), strict=False):
            row["arm"], row["setting"], row["value"] = f"a label read by people {workers}", "num_workers", workers
        return rows

    assert verdict(sweep(141, 140, 70, 35, 18), "dataloader.num_workers", cores=2)[1] == "scales with workers"
    assert verdict(sweep(141, 140, 75, 74, 76), "dataloader.num_workers", cores=2)[1] == "plateaus at the cores"


def test_a_turns_time_per_step_is_its_throughput_not_its_median() -> None:
    # Two workers hand out batches in pairs: 1 ms, 127 ms, 1 ms, 127 ms ... the median says 64 or
    # 1 or 127 depending on the count; the mean says what the loop really does.
    turn = Turn(arm="a", started=0, ended=1, step_ms=[1.0, 127.0] * 10 + [1.0])
    assert turn.mean_ms == pytest.approx(61.5, abs=0.5)


def test_a_report_shows_each_arm_and_the_verdict() -> None:
    rows = arms_of({"a": [100, 100, 100], "b": [50, 50, 50]}).rows()
    rows[1]["applied"] = ["num_workers=4 at train.py:90"]
    findings = Findings(playbook="slow-training", playbook_title="Slow training", target={}, environment={},
                        verdict="clean", first_departure=None, conclusion=None, conclusion_text="", path=[],
                        experiments=[{"cause": "input.waiting", "ran": True, "rounds": 3, "arms": rows,
                                      "verdict": "arm b helps", "shape": "scales with workers"},
                                     {"cause": "host.sync", "ran": False, "why": "a code change"}])
    text = to_markdown(findings)
    assert "### Fix of input.waiting tried, 3 rounds in turns" in text
    assert "| arm b | 50 (50-50) | 50% (50%-50%) | 30 | n/a |" in text
    assert "- arm b: num_workers=4 at train.py:90" in text  # where it was applied, under the table
    assert "arm b helps; the sweep scales with workers" in text
    assert "### Fix of host.sync not tried" in text and "a code change" in text
    assert Findings.from_json(findings.to_json()).experiments == findings.experiments


def test_an_arms_spread_is_of_the_same_turn_means_as_its_median() -> None:
    # Eight workers hand out batches in bursts: most steps take a millisecond, one in eight the wait.
    # The single steps' quartiles (about 1 ms) would not contain the arm's 50 ms per step.
    turns = [Turn(arm="a", started=0, ended=1, step_ms=[100.0] * 10)]
    turns += [Turn(arm="b", started=0, ended=1, step_ms=([1.0] * 7 + [wait]) * 4) for wait in (385.0, 393.0, 449.0)]
    a, b = Arms({"a": "as launched", "b": "num_workers=8"}, turns).rows()
    assert b["step_ms"] == pytest.approx(50.0, abs=0.01) and b["turns"] == 3 and b["steps"] == 96
    assert b["step_ms_q1"] <= b["step_ms"] <= b["step_ms_q3"]
    assert (b["step_ms_min"], b["step_ms_max"]) == (pytest.approx(49.0), pytest.approx(57.0))
    assert (a["step_ms_q1"], a["step_ms"], a["step_ms_q3"], a["turns"]) == (100.0, 100.0, 100.0, 1)


def test_each_arm_reports_its_peak_resident_memory_beside_its_speed():
    turns = [Turn("a", 0, 1, [10.0, 10.0], peak_rss_mb=900.0), Turn("b", 1, 2, [9.0], peak_rss_mb=600.0),
             Turn("a", 2, 3, [11.0], peak_rss_mb=950.0), Turn("b", 3, 4, [9.5], peak_rss_mb=None)]
    rows = {r["arm"]: r for r in Arms({"a": "as launched", "b": "fixed"}, turns).rows()}
    assert rows["as launched"]["peak_rss_mb"] == 950.0 and rows["fixed"]["peak_rss_mb"] == 600.0


def test_each_arm_reports_its_cuda_peak_where_it_has_one_and_the_reports_show_both_peaks():
    from fieldguide.report.findings import EXPERIMENT_COLUMNS, experiment_rows

    turns = [Turn("a", 0, 1, [10.0], peak_rss_mb=900.0, peak_cuda_mb=2048.0),
             Turn("b", 1, 2, [9.0], peak_rss_mb=600.0, peak_cuda_mb=1536.5),
             Turn("a", 2, 3, [11.0], peak_rss_mb=950.0, peak_cuda_mb=2100.0), Turn("b", 3, 4, [9.5])]
    rows = Arms({"a": "as launched", "b": "fixed"}, turns).rows()
    assert [r["peak_cuda_mb"] for r in rows] == [2100.0, 1536.5]
    [(_, table, _)] = experiment_rows([{"cause": "memory.activations", "ran": True, "rounds": 2, "verdict": "",
                                        "arms": rows}])
    peak = EXPERIMENT_COLUMNS.index("peak MB")
    assert [row[peak] for row in table] == ["950 RSS, 2100 CUDA", "600 RSS, 1536 CUDA"]
    cpu = Arms({"a": "as launched"}, [Turn("a", 0, 1, [10.0], peak_rss_mb=512.0)]).rows()
    [(_, table, _)] = experiment_rows([{"cause": "x", "ran": True, "rounds": 1, "verdict": "", "arms": cpu}])
    assert table[0][peak] == "512 RSS"


def test_turns_are_sized_from_steps_that_ran_alone() -> None:
    """Arm A's steps while the relaunch started (1.3 s) and the relaunch's warm-up do not size the
    turns: A's steps before the relaunch (35 ms) and the relaunch's fastest quarter do."""
    from types import SimpleNamespace

    from fieldguide.experiments.experiment import TurnExperiment

    def arm(rows: list[tuple[float, float]]) -> SimpleNamespace:
        conn = SimpleNamespace(steps=[[t, wall] for t, wall in rows])
        return SimpleNamespace(agent=SimpleNamespace(primary=lambda: conn))

    a = arm([(10.0 + i * 0.035, 0.035) for i in range(20)] + [(20.0 + i * 1.3, 1.3) for i in range(10)])
    b = arm([(30.0 + i, wall) for i, wall in enumerate([1.2, 0.9, 0.05, 0.04, 0.04, 0.04, 0.05, 0.04, 0.3, 0.04])])
    window = TurnExperiment._window(2.0, {"a": a, "b": b}, alone_until=15.0)
    assert window == 2.0  # ten steps of ~40 ms are under the 2 s floor
    # Sized from everything (the old rule), the turns would have been 13 s.
    assert TurnExperiment._window(2.0, {"a": a}, alone_until=100.0) == pytest.approx(13.0)


def test_a_report_shows_each_arms_losses_where_the_experiment_compared_them() -> None:
    from fieldguide.experiments.equivalence import compare_losses

    rows = arms_of({"a": [100, 100, 100], "b": [60, 60, 60]}).rows()
    job = {"first": [2.3, 2.2, 2.1, 2.0, 1.9], "seeded": {"at": "train.py:4", "seed": 0}}
    rows[1]["losses"] = compare_losses(job, {"first": [2.3, 2.2, 2.1, 2.0, 1.95]})
    findings = Findings(playbook="slow-training", playbook_title="Slow training", target={}, environment={},
                        verdict="clean", first_departure=None, conclusion=None, conclusion_text="", path=[],
                        experiments=[{"cause": "device.precision", "ran": True, "rounds": 3, "arms": rows,
                                      "verdict": "a regression, not a win"}])
    text = to_markdown(findings)
    assert "| arm | step ms (q1-q3) | vs launched (rounds) | losses | steps | peak MB |" in text
    assert "| arm b | 60 (60-60) | 60% (60%-60%) | different (3e-02) | 30 | n/a |" in text
