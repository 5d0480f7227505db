"""A launched job's start, taken apart: from the marks the agent's coldstart capability streams.

Two views of the same seconds, both adding up to the time from the process start to steady
training:
- `phases`: the timeline, consecutive, each ending at a milestone (interpreter ready, torch
  imported, CUDA initialised, first parameters, first batch, first step, steady state);
- `shares`: where the time went, disjoint: what the agent timed directly (compiling, torch.load,
  CUDA / process-group init, building the model) and the rest of each stretch (imports before
  torch was in, the set-up before the first batch, the first steps until steady).
Pure: no I/O, so it is tested on constructed marks.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Iterable
from typing import Any, TypedDict, cast


class Phase(TypedDict):
    phase: str
    title: str
    start_s: float
    seconds: float


class ColdStart(TypedDict, total=False):
    """A launched job's start taken apart (fieldguide/analysis/coldstart.py)."""

    phases: list[Phase]
    shares: dict[str, float]  # seconds per share of the start, disjoint
    total_s: float
    steady: bool
    steady_step: int | None
    where: dict[str, str]  # for the untimed shares, the job's line the main thread was at most


STEADY_WINDOW = 6  # steps whose mean decides "steady" (even: loaders that alternate long and short)
STEADY_TOLERANCE = 0.10  # within 10% of the settled median
STEADY_OUTLIER = 3.0  # and no step in the window over 3x it (a 10 s load between two steps is no warm step)

MILESTONES = {  # mark -> the title of the phase that ends there
    "interpreter": "Interpreter start",
    "torch_import": "Imports, to torch imported",
    "cuda_init": "CUDA initialised",
    "first_param": "Set-up, to the first model parameters",
    "first_forward": "To the first batch (first forward)",
    "first_step": "The first step",
    "steady": "Warm-up, to steady steps",
}
# What the agent timed itself, in the order a second is claimed when spans overlap.
SPANS = ("compile", "checkpoint", "device_init", "model_build")
SHARE_TITLES = {
    "imports": "imports (before torch was in)",
    "device_init": "CUDA / process-group init",
    "model_build": "building the model",
    "checkpoint": "loading checkpoints (torch.load)",
    "data_setup": "the job's own set-up before the first batch",
    "compile": "compiling (torch.compile)",
    "warmup": "the first steps, until steady (not compiling)",
}


def steady_step(step_ends: list[tuple[int, float]]) -> int | None:
    """The first step from which a window of steps has its mean within 10% of the settled
    median (the median of the later half of the steps seen) and no step over 3x it; None until
    enough steps are in. The window's mean, not each step: bursty loaders alternate."""
    ends = sorted(step_ends)
    durations = [(n, t - t_prev) for (_, t_prev), (n, t) in zip(ends, ends[1:], strict=False)]
    if len(durations) < 3 * STEADY_WINDOW:
        return None
    settled = statistics.median(d for _, d in durations[len(durations) // 2:])
    for i in range(len(durations) - STEADY_WINDOW + 1):
        window = [d for _, d in durations[i:i + STEADY_WINDOW]]
        if (abs(statistics.fmean(window) - settled) <= STEADY_TOLERANCE * settled
                and max(window) <= STEADY_OUTLIER * settled):
            return durations[i][0]
    return None


def _clip(spans: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _minus(spans: list[tuple[float, float]], taken: list[tuple[float, float]]) -> list[tuple[float, float]]:
    left: list[tuple[float, float]] = []
    for a, b in spans:
        pieces = [(a, b)]
        for c, d in taken:
            pieces = [p for x, y in pieces for p in ((x, min(y, c)), (max(x, d), y)) if p[1] > p[0]]
        left.extend(pieces)
    return left


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def compile_spans(compiles: Iterable[dict[str, Any]]) -> list[tuple[float, float]]:
    """(start, end) of each finished compile in the agent's `compile`/`compiles` stream."""
    return [(float(c["t_start"]), float(c["t_end"])) for c in compiles
            if c.get("t_start") is not None and c.get("t_end") is not None]


def covered_seconds(spans: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] inside any of the spans (overlapping spans count once)."""
    return _length(_union(_clip(spans, lo, hi)))


def take_apart(started: float, marks: list[dict[str, Any]], compiles: list[dict[str, Any]],
               now: float) -> ColdStart | None:
    """The report's `cold_start` from the spawn time, the agent's marks and the compile spans
    (all on one monotonic clock). Before steady state, up to `now`, with `steady` False."""
    points = {m["mark"]: float(m["t"]) for m in marks if "mark" in m}
    if "interpreter" not in points:
        return None
    spans: dict[str, list[tuple[float, float]]] = {name: [] for name in SPANS}
    names = {"checkpoint": "checkpoint", "cuda_init": "device_init", "dist_init": "device_init",
             "model_build": "model_build"}
    for m in marks:
        if m.get("span") in names:
            spans[names[m["span"]]].append((float(m["t_start"]), float(m["t_end"])))
        if m.get("span") == "cuda_init":
            points.setdefault("cuda_init", float(m["t_end"]))
    spans["compile"] = compile_spans(compiles)
    step = steady_step([(int(m["step"]), float(m["t"])) for m in marks if "step" in m])
    ends = {int(m["step"]): float(m["t"]) for m in marks if "step" in m}
    steady = step is not None and step - 1 in ends
    end = ends[step - 1] if steady and step is not None else max([now, *points.values()])
    if steady:
        points["steady"] = end
    timeline = sorted((t, name) for name, t in points.items() if started <= t <= end)
    phases, previous = [], started
    for t, name in timeline:
        phases.append({"phase": name, "title": MILESTONES[name], "start_s": round(previous - started, 3),
                       "seconds": round(t - previous, 3)})
        previous = t
    if not steady and end > previous:
        phases.append({"phase": "now", "title": "Still starting (not steady yet)",
                       "start_s": round(previous - started, 3), "seconds": round(end - previous, 3)})
    shares, untimed = _shares(started, end, points, spans)
    samples = [(float(t), str(w)) for m in marks for t, w in (m.get("where") or [])]
    return cast(ColdStart, {"phases": phases, "shares": shares, "total_s": round(end - started, 3), "steady": steady,
                            "steady_step": step if steady else None, "where": share_where(untimed, samples)})


def _shares(started: float, end: float, points: dict[str, float],
            spans: dict[str, list[tuple[float, float]]]) -> tuple[dict[str, float], dict[str, list[tuple[float, float]]]]:
    """Seconds per share, disjoint, adding up to end - started; and the seconds of the shares
    nothing timed (imports, data_setup, warmup), as intervals."""
    taken: list[tuple[float, float]] = []
    shares: dict[str, float] = {}
    for name in SPANS:  # what the agent timed itself, each second claimed once
        own = _minus(_union(_clip(spans[name], started, end)), taken)
        shares[name] = _length(own)
        taken = _union(taken + own)
    torch_in = points.get("torch_import", end)
    forward = min(points.get("first_forward", end), points.get("first_step", end))
    untimed: dict[str, list[tuple[float, float]]] = {}
    for name, lo, hi in (("imports", started, torch_in), ("data_setup", torch_in, forward), ("warmup", forward, end)):
        lo, hi = min(max(lo, started), end), min(max(hi, started), end)
        untimed[name] = _minus([(lo, hi)], taken) if hi > lo else []
        shares[name] = _length(untimed[name])
    return {name: round(seconds, 3) for name, seconds in shares.items()}, untimed


def share_where(untimed: dict[str, list[tuple[float, float]]], samples: list[tuple[float, str]]) -> dict[str, str]:
    """For the shares nothing timed before the first forward (imports, data_setup), the line of
    the job's own code the main thread was at most often in them ("build_index (train.py:40),
    78% of 31 samples"): what the share was spent on."""
    out: dict[str, str] = {}
    for name in ("imports", "data_setup"):
        seen = collections.Counter(w for t, w in samples if any(a <= t < b for a, b in untimed[name]))
        total = sum(seen.values())
        if total >= 3:
            where, count = seen.most_common(1)[0]
            out[name] = f"{where}, {count / total:.0%} of {total} samples"
    return out


def step_signal(signals: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The loop's signal that defines steps, and its first boundary (`t`): the end of the job's
    first real step. The loop counts a backward() as a step until the first optimizer step shows it
    the real signal, so the last signal it reported is the one."""
    kinds = [s for s in signals if "boundary" in s and "t" in s]
    return kinds[-1] if kinds else None


def from_connection(started: float, conn: Any, now: float) -> ColdStart | None:
    """The cold start of a launched job's primary agent connection (None without marks)."""
    if conn is None:
        return None
    marks = list(conn.stream("coldstart", "marks").items)
    signal = step_signal(conn.stream("loop", "signals").items)
    if signal is not None:  # the first step ends at the first boundary of the kind that defines steps
        marks = [{**m, "t": max(float(m["t"]), float(signal["t"]))} if m.get("mark") == "first_step" else m
                 for m in marks]
    compiles = list(conn.stream("compile", "compiles").items)
    end = conn.closed_at if conn.closed and conn.closed_at else now
    return take_apart(started, marks, compiles, end)
