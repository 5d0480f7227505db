"""What the compile agent's records say: frames, breaks, recompiles, compile time. Pure functions.

Inputs are the agent's streams (agent/inside/capabilities/compiled.py): `metrics` rows (one per
compile, dynamo's compilation-metrics record), `compiles` (compile callbacks: start, end, the
step it happened in) and the latest `state` (graph-break counters, the config that decides
caching and the recompile limit). A compile id "3/1" is frame 3's second compile; a frame named
`torch_dynamo_resume_in_<fn>_at_<line>` is the rest of <fn> after a graph break at <line>.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from fieldguide.agent.inside.rows import StepRow
from fieldguide.analysis.stats import median
from fieldguide.probes.stack_categories import is_agent_file

RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<fn>.+)_at_(?P<line>\d+)$")
LIMIT_MARKS = ("recompile limit", "cache_size_limit", "cache size limit")


def frame_of(compile_id: Any) -> str:
    """"3/1" -> "3" (a compile id may carry a compiled-autograd prefix: "!0/3/1")."""
    text = str(compile_id or "")
    parts = text.lstrip("!").split("/")
    return parts[-2] if len(parts) >= 2 else text


def attempt_of(compile_id: Any) -> int:
    try:
        return int(str(compile_id).split("/")[-1])
    except ValueError:
        return 0


def where(row: dict[str, Any]) -> str:
    file = row.get("co_filename") or "?"
    return f"{os.path.basename(file)}:{row.get('co_firstlineno')}"


def is_user_file(path: str | None) -> bool:
    """The job's own code: not a library's, not the standard library's, not fieldguide's agent's
    (its forward pre-hook, which dynamo sees, once listed as `loop.py:147` among the user's frames)."""
    return bool(path) and not is_agent_file(str(path)) and \
        not re.search(r"(?:^|/)(?:site-packages|dist-packages)/|/lib/python3[.\d]*/|^<", str(path))


@dataclass
class Frame:
    """One code object dynamo compiled, and what happened to it."""

    id: str
    name: str | None = None
    where: str | None = None
    user_code: bool = False
    compiles: int = 0  # forward compiles that produced a graph
    attempts: int = 0  # every compile, failed ones too
    limit_hit: bool = False
    recompile_reasons: list[str] = field(default_factory=list)
    compile_s: float = 0.0  # forward and backward
    restart_reasons: list[str] = field(default_factory=list)  # graph breaks inside it

    @property
    def recompiles(self) -> int:
        return max(self.attempts - 1, 0)

    @property
    def resume(self) -> tuple[str, int] | None:
        match = RESUME.match(self.name or "")
        return (match["fn"], int(match["line"])) if match else None


def frames_from(metrics: list[dict[str, Any]]) -> dict[str, Frame]:
    frames: dict[str, Frame] = {}
    for row in metrics:
        fid = frame_of(row.get("compile_id"))
        frame = frames.setdefault(fid, Frame(id=fid))
        seconds = (row.get("duration_us") or 0) / 1e6 or row.get("entire_frame_compile_time_s") or 0.0
        frame.compile_s += seconds
        if row.get("is_forward") is False:
            continue  # AOT's lazy backward compile of a graph already counted
        frame.attempts += 1
        if row.get("co_name"):
            frame.name = row["co_name"]
            frame.where = where(row)
            frame.user_code = is_user_file(row.get("co_filename"))
        if row.get("is_forward") and not row.get("fail_type"):
            frame.compiles += 1
        failure = str(row.get("fail_reason") or "")
        if any(mark in failure.lower() for mark in LIMIT_MARKS):
            frame.limit_hit = True
        if row.get("recompile_reason"):
            frame.recompile_reasons.append(str(row["recompile_reason"]).splitlines()[0])
        for reason in row.get("restart_reasons") or []:
            if reason and reason not in frame.restart_reasons:
                frame.restart_reasons.append(reason)
    return frames


def break_rows(frames: dict[str, Frame], regions: dict[str, int] | None, steps: int) -> list[dict[str, Any]]:
    """One row per graph break: where (the user's line), why, and how often it runs per step.

    A break at a branch on a tensor's value resumes in one function per branch: both are the
    same break, one row, their runs per step added."""
    reasons = [r for f in frames.values() for r in f.restart_reasons]
    by_site: dict[tuple[str, str], dict[str, Any]] = {}
    for frame in frames.values():
        resume = frame.resume
        if resume is None:
            continue
        fn, line = resume
        file = (frame.where or "?").rsplit(":", 1)[0]
        runs = None
        if regions is not None and steps:
            runs = sum(n for cid, n in regions.items() if frame_of(cid) == frame.id) / steps
        row = by_site.get((f"{file}:{line}", fn))
        if row is None:
            by_site[(f"{file}:{line}", fn)] = {"where": f"{file}:{line}", "function": fn,
                                               "reason": _reason_for(reasons, len(by_site)), "per_step": runs}
        elif runs is not None:
            row["per_step"] = (row["per_step"] or 0.0) + runs
    return list(by_site.values())


def _reason_for(reasons: list[str], index: int) -> str | None:
    if not reasons:
        return None
    return reasons[min(index, len(reasons) - 1)].splitlines()[0]


def recompile_rows(frames: dict[str, Frame]) -> list[dict[str, Any]]:
    rows = []
    for frame in sorted(frames.values(), key=lambda f: -f.recompiles):
        if not frame.recompiles:
            continue
        rows.append({"where": frame.where, "function": frame.name, "recompiles": frame.recompiles,
                     "limit_hit": frame.limit_hit,
                     "reason": frame.recompile_reasons[-1] if frame.recompile_reasons else None})
    return rows


def phases(metrics: list[dict[str, Any]]) -> dict[str, float]:
    """Compile seconds by phase: dynamo's tracing, AOT autograd, inductor (forward and backward)."""
    dynamo = aot = inductor = 0.0
    for row in metrics:
        total = row.get("entire_frame_compile_time_s")
        backend = row.get("backend_compile_time_s") or 0.0
        ind = row.get("inductor_compile_time_s") or 0.0
        if row.get("is_forward") is False:
            inductor += ind
            aot += max(((row.get("duration_us") or 0) / 1e6) - ind, 0.0)
            continue
        if total is not None:
            dynamo += max(total - backend, 0.0)
            aot += max(backend - ind, 0.0)
            inductor += ind
    return {"dynamo_s": round(dynamo, 3), "aot_s": round(aot, 3), "inductor_s": round(inductor, 3)}


def cache_counts(metrics: list[dict[str, Any]]) -> dict[str, int]:
    hits = sum((r.get("inductor_fx_local_cache_hit_count") or 0) + (r.get("inductor_fx_remote_cache_hit_count") or 0)
               + (r.get("aotautograd_local_cache_hit_count") or 0) for r in metrics)
    misses = sum((r.get("inductor_fx_local_cache_miss_count") or 0) + (r.get("aotautograd_local_cache_miss_count") or 0)
                 for r in metrics)
    return {"cache_hits": hits, "cache_misses": misses}


def compile_seconds(compiles: list[dict[str, Any]], metrics: list[dict[str, Any]]) -> float:
    """Wall seconds inside compiles: the callbacks' spans (they nest nothing), else the records'."""
    spans = [c["t_end"] - c["t_start"] for c in compiles if c.get("t_start") is not None]
    if spans:
        return float(sum(spans))
    return float(sum((r.get("duration_us") or 0) / 1e6 for r in metrics))


def caches_disabled(config: dict[str, Any]) -> bool:
    return bool(config.get("force_disable_caches")) or config.get("fx_graph_cache") is False


@dataclass
class Timeline:
    """When the job compiled and trained: seconds from the agent's start (the interpreter's)."""

    first_step_s: float | None
    last_compile_s: float | None
    steady_from_step: int | None  # the first step after which nothing compiled
    run_s: float
    compile_s: float

    @property
    def train_s(self) -> float:
        return max(self.run_s - self.compile_s, 0.0)


def timeline(t0: float, now: float, rows: list[Any], steps_before: int, compiles: list[dict[str, Any]],
             compile_s: float) -> Timeline:
    steps = [StepRow.read(r) for r in rows]
    first = steps[0].t_end - t0 if steps and steps_before == 0 else None
    ends = [c["t_end"] for c in compiles if c.get("t_end") is not None]
    last = max(ends) if ends else None
    steady = None
    if last is not None:
        after = [i for i, row in enumerate(steps) if row.t_end - row.wall_s >= last]
        steady = steps_before + after[0] + 1 if after else None
    return Timeline(first_step_s=first, last_compile_s=(last - t0) if last is not None else None,
                    steady_from_step=steady, run_s=max(now - t0, 0.0), compile_s=compile_s)


def steady_step_ms(rows: list[Any], after: float | None) -> float | None:
    walls = [row.wall_s for row in map(StepRow.read, rows) if after is None or row.t_end - row.wall_s >= after]
    value = median(walls[-200:])
    return None if value is None else round(value * 1000, 3)
