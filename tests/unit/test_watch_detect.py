"""The watch's baseline and change-point rule on constructed series: a sustained shift departs,
one slow step, an evaluation's pause, a checkpoint and memory that steps up once do not."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from fieldguide.playbook.source import PlaybookError
from fieldguide.watch.detect import (
    Detector,
    SeriesShape,
    between,
    check,
    learn,
    rises_each_quarter,
    slope_per_min,
)
from fieldguide.watch.rules import load_rules

RULES = load_rules()


def steps(start: float, end: float, ms: float, jitter: float = 0.05, seed: int = 0) -> list[tuple[float, float]]:
    """A step every `ms` from start to end, each within ±jitter of it."""
    rng = random.Random(seed)
    points, t = [], start
    while t < end:
        value = ms * (1 + rng.uniform(-jitter, jitter))
        t += value / 1000
        points.append((t, value))
    return points


TRAINING = steps(0, 200, 50)  # a job that trains all along (launched, windows are judged while it does)


def run(detector: Detector, series: dict, baseline: dict, start: float, end: float) -> float | None:
    """The first second in [start, end] at which a signal fires, checking once a second."""
    t = start
    while t <= end:
        _, fired = detector.step(series, baseline, t)
        if fired:
            return t
        t += 1.0
    return None


def test_the_bundled_rules_load_with_every_signal_and_its_playbook() -> None:
    assert {s.id for s in RULES.signals} == {"step_time", "data_wait", "memory_slope", "gpu_busy", "sm_busy"}
    assert {s.playbook for s in RULES.signals} == {"slow-training", "oom", "low-gpu-util"}
    assert RULES.learn_s > 0 and RULES.window_s > 0


def test_a_sustained_rise_in_step_time_departs_after_its_sustain_and_not_before() -> None:
    series = {"step_ms": steps(0, 60, 50) + steps(60, 120, 75, seed=1)}
    baseline = learn(series, 10, 40, RULES)
    assert baseline["step_ms"] == pytest.approx(50, rel=0.05)
    fired = run(Detector(RULES), series, baseline, 40, 120)
    step_time = next(s for s in RULES.signals if s.id == "step_time")
    assert fired is not None and 60 + step_time.sustain_s <= fired <= 60 + step_time.sustain_s + RULES.window_s


def test_one_slow_step_a_checkpoint_and_an_evaluations_pause_do_not_depart() -> None:
    points = steps(0, 200, 50)
    points = [(t, 4000.0) if 100 < t < 100.06 else (t, v) for t, v in points]  # one 4 s step (a save)
    points = [p for p in points if not 140 < p[0] < 152]  # 12 s of evaluation: no training step
    points.append((152.0, 12000.0))  # the step that spans it
    series = {"step_ms": sorted(points)}
    baseline = learn(series, 10, 40, RULES)
    assert run(Detector(RULES), series, baseline, 40, 200) is None


def test_a_window_that_cannot_be_judged_neither_starts_nor_stops_the_clock() -> None:
    rules = replace(RULES, min_steps=5)
    series = {"step_ms": steps(0, 50, 50) + steps(50, 58, 100) + steps(70, 90, 100, seed=2)}
    baseline = learn(series, 10, 40, rules)
    detector = Detector(rules)
    detector.step(series, baseline, 57.0)
    assert "step_time" in detector.since
    _, fired = detector.step(series, baseline, 69.0)  # the last 10 s hold one step: not judged
    assert not fired and "step_time" in detector.since


def test_a_rise_in_the_input_share_departs_in_points() -> None:
    series = {"input_share": [(t, 0.1) for t, _ in steps(0, 60, 20)] + [(t, 0.4) for t, _ in steps(60, 100, 20)],
              "step_ms": steps(0, 100, 20)}
    baseline = learn(series, 10, 40, RULES)
    assert run(Detector(RULES), series, baseline, 40, 100) is not None
    flat = {"input_share": [(t, 0.1 + 0.05 * (i % 2)) for i, (t, _) in enumerate(steps(0, 100, 20))],
            "step_ms": steps(0, 100, 20)}
    assert run(Detector(RULES), flat, learn(flat, 10, 40, RULES), 40, 100) is None


def test_memory_that_keeps_growing_departs_but_one_that_steps_up_and_stays_does_not() -> None:
    leak = {"memory_mb": [(float(t), 500.0 + (max(t - 60, 0) * 1.5)) for t in range(0, 120)],  # 90 MB/min from 60 s
            "step_ms": TRAINING}
    baseline = learn(leak, 10, 40, RULES)
    assert abs(baseline["memory_mb"]) < 1
    fired = run(Detector(RULES), leak, baseline, 40, 120)
    memory = next(s for s in RULES.signals if s.id == "memory_slope")
    assert fired is not None and fired <= 60 + memory.span_s + memory.sustain_s
    plateau = {"memory_mb": [(float(t), 500.0 + (300.0 if t >= 70 else 0.0)) for t in range(0, 200)],  # an eval's buffers
               "step_ms": TRAINING}
    assert run(Detector(RULES), plateau, learn(plateau, 10, 40, RULES), 40, 200) is None


def test_memory_that_climbs_for_twenty_seconds_after_the_warm_up_and_stops_does_not_depart() -> None:
    climb = {"memory_mb": [(float(t), 500.0 + 1.2 * min(max(t - 45, 0), 20)) for t in range(0, 200)]}  # 72 MB/min, 20 s
    assert run(Detector(RULES), climb, learn(climb, 10, 40, RULES), 40, 200) is None


def test_a_leak_learnt_as_the_jobs_self_does_not_depart_again_as_its_rate_wobbles() -> None:
    rate = [800.0 + 0.5 * max(t - 40, 0) for t in range(0, 200)]  # MB/min, up 10% in 160 s
    level, points = 500.0, []
    for t in range(0, 200):
        level += rate[t] / 60
        points.append((float(t), level))
    leak = {"memory_mb": points}
    assert run(Detector(RULES), leak, learn(leak, 10, 40, RULES), 40, 200) is None


def test_a_job_that_grows_from_its_start_departs_only_when_it_grows_faster() -> None:
    steady = {"memory_mb": [(float(t), 500.0 + t * 0.5) for t in range(0, 200)]}  # 30 MB/min all along: its self
    assert run(Detector(RULES), steady, learn(steady, 10, 40, RULES), 40, 200) is None


def test_gpu_utilisation_that_drops_departs() -> None:
    series = {"gpu_util": [(float(t), 95.0 if t < 60 else 50.0) for t in range(0, 120)], "step_ms": TRAINING}
    assert run(Detector(RULES), series, learn(series, 10, 40, RULES), 40, 120) is not None


def test_an_idle_gpu_during_an_evaluation_with_no_training_step_is_not_judged() -> None:
    training = [p for p in TRAINING if not 60 < p[0] < 100]  # 40 s of evaluation: no training step
    series = {"gpu_util": [(float(t), 5.0 if 60 < t < 100 else 95.0) for t in range(0, 200)], "step_ms": training}
    assert run(Detector(RULES), series, learn(series, 10, 40, RULES), 40, 200) is None
    ungated = Detector(RULES, SeriesShape(gated_by=None))  # attached: no step to gate on
    assert run(ungated, series, learn(series, 10, 40, RULES), 40, 200) is not None


def test_a_departure_on_either_side_of_a_long_pause_is_not_held_across_it() -> None:
    rules = replace(RULES, min_steps=5)
    series = {"step_ms": steps(0, 50, 50) + steps(50, 58, 100) + steps(80, 84, 100, seed=3)}
    baseline = learn(series, 10, 40, rules)
    detector = Detector(rules)
    # slow from 50 s (departing ~55-67 s, as the window empties), 22 s paused, 4 s slow: not 15 s held
    assert run(detector, series, baseline, 51, 84) is None
    assert "step_time" in detector.since and detector.since["step_time"] >= 80


def test_a_series_with_no_baseline_is_not_judged() -> None:
    signal = next(s for s in RULES.signals if s.id == "gpu_busy")
    reading = check(signal, [(1.0, 10.0)], {}, 2.0, RULES)
    assert reading.value is None and not reading.departs


def test_a_sparse_series_is_judged_over_its_wider_window() -> None:
    shape = SeriesShape(per_step=(), windows={"input_share": 15.0})
    signal = next(s for s in RULES.signals if s.id == "data_wait")
    points = [(float(t), 0.6) for t in range(0, 60, 5)]
    assert check(signal, points, {"input_share": 0.1}, 59.0, RULES).value is None  # 2 points in 10 s
    assert check(signal, points, {"input_share": 0.1}, 59.0, RULES, shape).departs


def test_the_helpers() -> None:
    assert between([(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)], 1.0, 3.0) == [(2.0, 2.0), (3.0, 3.0)]
    assert slope_per_min([(0.0, 0.0), (30.0, 1.0), (60.0, 2.0)]) == pytest.approx(2.0)
    assert slope_per_min([(0.0, 1.0), (1.0, 1.0)]) is None
    assert rises_each_quarter([(float(t), float(t)) for t in range(21)], 0.0, 20.0)
    assert not rises_each_quarter([(float(t), 5.0 if t > 10 else 0.0) for t in range(21)], 0.0, 20.0)


@pytest.mark.parametrize(("text", "needle"), [
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals: []\n", "non-empty list"),
    ("warmup_s: 1\nlearn_s: 0\nwindow_s: 1\nmin_steps: 1\nsignals: [{id: a}]\n", "learn_s"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: nope, "
     "rise_ratio: 1.2, sustain_s: 1, playbook: slow-training}\n", "unknown series 'nope'"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: step_ms, "
     "rise_ratio: 1.2, drop_points: 3, sustain_s: 1, playbook: slow-training}\n", "exactly one condition"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: step_ms, "
     "rise_ratio: 1.2, sustain_s: 1, playbook: no-such-book}\n", "unknown playbook"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\ncolour: red\nsignals: []\n", "colour"),
    ("warmup_s: .nan\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals: []\n", "warmup_s"),
    ("warmup_s: 1\nlearn_s: 900\nwindow_s: 1\nmin_steps: 1\nsignals: []\n", "at most 600"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 2.5\nsignals: []\n", "whole number"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: step_ms, "
     "rise_ratio: 0.9, sustain_s: 1, playbook: slow-training}\n", "above 1"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: memory_mb, "
     "rise_points: 5, sustain_s: 1, playbook: oom}\n", "slope_mb_per_min"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: memory_mb, "
     "slope_mb_per_min: 5, sustain_s: 1, playbook: oom}\n", "needs span_s"),
    # Issue 33: numbers no watch could ever depart past, and YAML's `1e308` read as text.
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: step_ms, "
     "rise_ratio: 1.0e+308, sustain_s: 1, playbook: slow-training}\n", "rise_ratio: must be at most 100"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1000000000000000000\nsignals: []\n",
     "min_steps: must be at most 100000"),
    ("warmup_s: 1\nlearn_s: 1\nwindow_s: 1\nmin_steps: 1\nsignals:\n  - {id: a, title: t, series: step_ms, "
     "rise_ratio: 1e308, sustain_s: 1, playbook: slow-training}\n", "YAML reads '1e308' as text"),
])
def test_bad_rules_are_one_line_naming_the_file(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "watch.yaml"
    path.write_text(text)
    with pytest.raises(Exception) as caught:
        load_rules(path)
    message = str(caught.value)
    assert needle in message and "\n" not in message
    assert isinstance(caught.value, PlaybookError) or "playbook" in needle


def test_sm_activity_that_drops_departs_to_low_gpu_util() -> None:
    signal = next(s for s in RULES.signals if s.id == "sm_busy")
    assert signal.playbook == "low-gpu-util" and signal.series == "sm_active"
    series = {"sm_active": [(float(t), 70.0 if t < 60 else 30.0) for t in range(0, 120)], "step_ms": TRAINING}
    assert run(Detector(RULES), series, learn(series, 10, 40, RULES), 40, 120) is not None
