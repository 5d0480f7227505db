"""Replay a job's own step counts through the watch's step-time check, offline.

    python benchmarks/watch_replay.py JOB_OUTPUT... [--ratio 1.25 1.5] [--hold 15 30]

JOB_OUTPUT is what a job printed, with lines such as `step 1234 loss ...` about every 2 s (the
zoo's trainers print so, watched or not). Each interval's steps become points of the step-time
series at the interval's mean step; the watch's phases (warm-up, learning, watching, a walk of
WALK_S and its settling) run over them with the bundled rules, the step-time signal's ratio and
hold taken from the grid. It says how many departures each pair would have recorded on that run,
and when: how often a job's own swings cross a threshold, without rerunning the job.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fieldguide.watch.detect import Detector, Point, learn  # noqa: E402
from fieldguide.watch.rules import WatchRules, load_rules  # noqa: E402
from fieldguide.watch.store import SeriesStore  # noqa: E402

PRINT_EVERY_S = 2.0
WALK_S = 10.0  # a walk's length on this box (8-12 s in the benchmark's events)
STEP_LINE = re.compile(r"\bstep (\d+) loss\b")


def step_points(text: str) -> list[Point]:
    """The step-time points of a printed run (an interval with no step, an evaluation, has none)."""
    counts = [int(m) for m in STEP_LINE.findall(text)]
    points: list[Point] = []
    t = 0.0
    for before, after in zip(counts, counts[1:], strict=False):
        steps = after - before
        if steps > 0:
            each = PRINT_EVERY_S / steps
            points.extend((t + (i + 1) * each, 1000 * each) for i in range(steps))
        t += PRINT_EVERY_S
    return points


def replay(points: list[Point], rules: WatchRules) -> list[tuple[float, float, float]]:
    """(time, baseline ms, window ms) of each step-time departure the watch would have recorded."""
    store, detector = SeriesStore(), Detector(rules)
    phase, since, baseline = "warming", points[0][0], {}
    departures, i, now = [], 0, points[0][0]
    while now < points[-1][0]:
        now += 1.0
        fresh = []
        while i < len(points) and points[i][0] <= now:
            fresh.append(points[i])
            i += 1
        store.add("step_ms", fresh)
        store.trim(now)
        if phase == "warming" and now - since >= rules.warmup_s:
            phase, since = "learning", now
        elif phase == "walking" and now - since >= WALK_S:
            phase, since = "settling", now
        elif phase == "settling" and now - since >= rules.window_s:
            phase, since = "learning", now
        elif phase == "learning" and now - since >= rules.learn_s:
            baseline = learn(store.recent, since, now, rules)
            detector.reset()
            phase, since = "watching", now
        elif phase == "watching":
            _, fired = detector.step(store.recent, baseline, now)
            fired = [r for r in fired if r.signal == "step_time"]
            if fired:
                departures.append((round(now), round(baseline["step_ms"], 2), round(fired[0].value or 0, 2)))
                phase, since = "walking", now
    return departures


def with_step_time(rules: WatchRules, ratio: float, hold: float) -> WatchRules:
    return replace(rules, signals=tuple(replace(s, threshold=ratio, sustain_s=hold) if s.id == "step_time" else s
                                        for s in rules.signals))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", nargs="+", type=Path)
    parser.add_argument("--ratio", type=float, nargs="+", default=[1.25, 1.3, 1.4, 1.5])
    parser.add_argument("--hold", type=float, nargs="+", default=[15, 30, 45])
    args = parser.parse_args()
    rules = load_rules()
    for path in args.outputs:
        points = step_points(path.read_text(encoding="utf-8", errors="replace"))
        if len(points) < 2:
            print(f"{path}: no `step N loss` lines")
            continue
        print(f"{path}: {points[-1][0]:.0f} s of steps, median of the whole run "
              f"{sorted(v for _, v in points)[len(points) // 2]:.2f} ms")
        for ratio in args.ratio:
            for hold in args.hold:
                found = replay(points, with_step_time(rules, ratio, hold))
                print(f"  {ratio:g}x held {hold:g} s: {len(found)} departure(s) {found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
