"""The job's own baseline and the departures from it: pure functions over timed points.

A series is a list of (t, value) points: one per training step for step_ms and input_share,
one per poll for memory_mb and gpu_util. The baseline is the median of the learning period
(memory: its least-squares slope). A check reads the last window: its median against the
baseline, or for memory the slope of the last span_s, rising quarter after quarter (one
jump at an evaluation is a plateau after it, not a slope). Either must then hold for sustain_s.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from fieldguide.analysis.stats import median
from fieldguide.watch.rules import Signal, WatchRules

Point = tuple[float, float]
MIN_POLLED = 3  # points of a polled series (memory, GPU, stack windows) a window needs to be judged
QUARTERS = 4
CHECK_SLACK_S = 2.0  # checks come about once a second: a longer gap than a window and this is a pause


@dataclass(frozen=True)
class SeriesShape:
    """How a source gives its series: which come one point per training step (a window needs
    `min_steps` of them), and which need a wider window than the rules' (sparse stack windows)."""

    per_step: tuple[str, ...] = ("step_ms", "input_share")
    windows: dict[str, float] = field(default_factory=dict)
    # Launched, every window is judged only while the job trains: an evaluation or a checkpoint
    # with the GPU idle is not a drop in GPU busy.
    gated_by: str | None = "step_ms"

    def needed(self, series: str, rules: WatchRules) -> int:
        return rules.min_steps if series in self.per_step else MIN_POLLED

    def window(self, series: str, rules: WatchRules) -> float:
        return max(rules.window_s, self.windows.get(series, 0.0))


def between(points: Sequence[Point], start: float, end: float) -> list[Point]:
    """The points in (start, end] of a series sorted by time."""
    lo = bisect.bisect_right(points, (start, math.inf))
    hi = bisect.bisect_right(points, (end, math.inf))
    return list(points[lo:hi])


def slope_per_min(points: Sequence[Point]) -> float | None:
    """Least-squares slope of value over time, per minute; None for fewer than 3 points."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return None
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


def rises_each_quarter(points: Sequence[Point], start: float, end: float) -> bool:
    """The span's quarters, each's median above the one before: growth that goes on, not a step."""
    width = (end - start) / QUARTERS
    medians = []
    for i in range(QUARTERS):
        part = [v for t, v in points if start + i * width < t <= start + (i + 1) * width]
        if not part:
            return False
        medians.append(median(part) or 0.0)
    return all(b > a for a, b in zip(medians, medians[1:], strict=False))


@dataclass(frozen=True)
class Reading:
    """One signal's check: the window's value against the baseline, and whether it departs."""

    signal: str
    value: float | None  # None: the window could not be judged (too few steps: an eval, a save)
    baseline: float | None
    departs: bool

    def as_dict(self) -> dict[str, float | str | None]:
        return {"signal": self.signal, "now": _round(self.value), "baseline": _round(self.baseline)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def learn(series: dict[str, list[Point]], start: float, end: float, rules: WatchRules,
          shape: SeriesShape = SeriesShape()) -> dict[str, float]:
    """The baseline of each series over [start, end]: the median, or memory's slope per minute.
    A series with too few points there has no baseline, and its signals are not judged."""
    baseline: dict[str, float] = {}
    for name, points in series.items():
        span = between(points, start, end)
        if name == "memory_mb":
            slope = slope_per_min(span)
            if slope is not None:
                baseline[name] = slope
        elif len(span) >= shape.needed(name, rules):
            baseline[name] = median([v for _, v in span]) or 0.0
    return baseline


def check(signal: Signal, points: Sequence[Point], baseline: dict[str, float], now: float,
          rules: WatchRules, shape: SeriesShape = SeriesShape()) -> Reading:
    """Whether the signal's condition holds now (the holding over time is Detector's)."""
    base = baseline.get(signal.series)
    if base is None:
        return Reading(signal.id, None, None, False)
    if signal.condition == "slope_mb_per_min":
        span = between(points, now - signal.span_s, now)
        slope = slope_per_min(span)
        if slope is None or len(span) < QUARTERS * 2:
            return Reading(signal.id, None, base, False)
        growth = slope * signal.span_s / 60.0
        # Above the baseline's own slope by the threshold, and by a share of it: a leak already
        # learnt as the job's self is not a new departure each time its rate wobbles.
        departs = (slope - base >= max(signal.threshold, signal.over_own_slope * abs(base))
                   and growth >= signal.min_growth_mb and rises_each_quarter(span, now - signal.span_s, now))
        return Reading(signal.id, slope, base, departs)
    window = [v for _, v in between(points, now - shape.window(signal.series, rules), now)]
    if len(window) < shape.needed(signal.series, rules):
        return Reading(signal.id, None, base, False)
    value = median(window) or 0.0
    departs = {
        "rise_ratio": base > 0 and value >= base * signal.threshold,
        "rise_points": value >= base + signal.threshold,
        "drop_points": value <= base - signal.threshold,
    }[signal.condition]
    return Reading(signal.id, value, base, bool(departs))


@dataclass
class Detector:
    """Each signal's condition held over time: a window that departs starts the clock, one that
    does not stops it, one that cannot be judged (an evaluation's pause) leaves it as it was,
    unless the pause outlasts a window: held means departing check after check."""

    rules: WatchRules
    shape: SeriesShape = field(default_factory=SeriesShape)
    since: dict[str, float] = field(default_factory=dict)
    judged: dict[str, float] = field(default_factory=dict)  # each signal's last judged check

    def reset(self) -> None:
        self.since.clear()
        self.judged.clear()

    def training(self, series: dict[str, list[Point]], now: float) -> bool:
        gate = self.shape.gated_by
        if gate is None:
            return True
        return len(between(series.get(gate, []), now - self.rules.window_s, now)) >= self.rules.min_steps

    def step(self, series: dict[str, list[Point]], baseline: dict[str, float], now: float
             ) -> tuple[list[Reading], list[Reading]]:
        """Every signal's reading now, and those that departed for long enough."""
        readings, fired = [], []
        training = self.training(series, now)
        for signal in self.rules.signals:
            if not training:
                readings.append(Reading(signal.id, None, baseline.get(signal.series), False))
                continue
            reading = check(signal, series.get(signal.series, []), baseline, now, self.rules, self.shape)
            readings.append(reading)
            if reading.value is None:
                continue
            last = self.judged.get(signal.id)
            self.judged[signal.id] = now
            if not reading.departs:
                self.since.pop(signal.id, None)
                continue
            if last is not None and now - last > self.rules.window_s + CHECK_SLACK_S:
                self.since.pop(signal.id, None)  # a pause longer than a window between two departing checks
            started = self.since.setdefault(signal.id, now)
            if now - started >= signal.sustain_s:
                fired.append(reading)
        return readings, fired
