"""Try the fix: relaunch the job with a cause's fix applied by the agent, and time it against the
job as launched, the same way, in turns (experiment.py).

A cause page declares its experiment as data (`experiment:` in causes.yaml): an agent override
and the values to try (`dataloader.num_workers` over 0, 1, 2, 4, 8 workers, capped by the
cores this machine lets the job use), or an environment (`TORCH_COMPILE_DISABLE=1`), or `none:`
with why (a leak is fixed in the code). The overrides reach the relaunched job through
FIELDGUIDE_OVERRIDES, which a user can set by hand to reproduce an arm.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from fieldguide.experiments.equivalence import DEFAULT_RTOL, compare_losses
from fieldguide.experiments.experiment import Arms, ExperimentFailed, TurnExperiment
from fieldguide.playbook.schema import Cause
from fieldguide.targets import LaunchTarget

HELPS = 0.95  # an arm whose steps take at most this share of the job's, in every round, helps
SCALES = 1.3  # a worker sweep whose last arm runs this much faster than its first scales
WORKERS = "num_workers"  # the setting of a worker sweep
WORKERS_PER_CORE = 4


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def uses_cuda(target: LaunchTarget) -> bool:
    """Whether the launched job has started CUDA (the agent's efficiency state names its device)."""
    if target.agent is None or target.agent.primary() is None:
        return False
    reply = target.agent.request("efficiency", {"count": False}, timeout=5.0)
    return bool(reply.ok and reply.result.get("cuda_device"))


class PlannedArm(NamedTuple):
    """An arm to relaunch: its label for people, the environment change, and what it sets, by
    name (`setting`, the override's last part: `num_workers`) and `value`, for what reads arms."""

    label: str
    change: dict[str, str]
    setting: str | None = None
    value: Any = None


def plan(cause: Cause, cores: int | None = None, cuda: bool = False) -> list[PlannedArm] | str:
    """The arms to relaunch, or why there is no experiment; `cuda_values` only for a job on CUDA."""
    spec = cause.experiment
    if spec is None:
        return f"{cause.id} declares no experiment"
    if "none" in spec:
        return str(spec["none"])
    override, env = spec.get("override"), dict(spec.get("env") or {})
    values = list(spec.get("values") or []) + (list(spec.get("cuda_values") or []) if cuda else [])
    if override == "dataloader.num_workers":
        # Past the cores on purpose: a loader that waits (I/O, latency) keeps scaling there, one
        # that computes plateaus at the cores, and the sweep's shape is what tells them apart.
        cap = WORKERS_PER_CORE * (cores if cores is not None else usable_cores())
        values = [v for v in values if int(v) <= cap] or [0]
    arms = []
    for value in values or [None]:
        change = dict(env)
        label = " ".join(f"{k}={v}" for k, v in env.items())
        setting = None
        if override is not None:
            setting = override.rsplit(".", 1)[-1]
            text = str(value).lower() if isinstance(value, bool) else str(value)
            change["FIELDGUIDE_OVERRIDES"] = f"{override}={text}"
            label = f"{setting}={text}" + (f" {label}" if label else "")
        arms.append(PlannedArm(label, change, setting, value if setting else None))
    return arms


def sweep_shape(rows: list[dict[str, Any]], cores: int) -> str | None:
    """A worker sweep past the cores: does the last arm still run faster than the one with as many
    workers as cores (a loader that waits), or does it stop there (a loader that computes)?"""
    by_workers = {int(row["value"]): row["step_ms"] for row in rows
                  if row.get("setting") == WORKERS and row.get("value") is not None and row["step_ms"]}
    at_cores = [w for w in by_workers if w <= cores]
    past = [w for w in by_workers if w > cores]
    if not at_cores or not past:
        return None
    return "scales with workers" if by_workers[max(at_cores)] / by_workers[max(past)] >= SCALES else \
        "plateaus at the cores"


def verdict(rows: list[dict[str, Any]], override: str | None, cores: int | None = None) -> tuple[str, str | None]:
    """What the arms say, in words, and for a worker sweep whether it scales or plateaus. An arm
    whose losses differ from the job's (rows' `losses`, where the experiment compares them) is
    never the one that helps: faster at computing something else is a regression."""
    variants = [r for r in rows[1:] if r["vs_a"] is not None]
    if not variants:
        return "no arm timed steps in every round: nothing to compare", None
    shape = None
    if override == "dataloader.num_workers":
        shape = sweep_shape(variants, cores if cores is not None else usable_cores())
    faster = [r for r in variants if r["vs_a"] <= HELPS and (r["vs_a_max"] or 1.0) < 1.0]
    wins = [r for r in faster if (r.get("losses") or {}).get("equivalent") is not False]
    best = min(wins or variants, key=lambda r: r["vs_a"])
    if wins:
        text = (f"{best['arm']} helps: its steps take {best['vs_a']:.0%} of the job's as launched "
                f"(rounds {best['vs_a_min']:.0%}-{best['vs_a_max']:.0%}), {1 / best['vs_a']:.2f}x the steps/s")
    elif faster:
        best = min(faster, key=lambda r: r["vs_a"])
        text = (f"a regression, not a win: {best['arm']} is faster ({best['vs_a']:.0%} of the job's step time) "
                f"but computes something else")
    elif all((r["vs_a_min"] or 0.0) > 1.0 for r in variants):
        text = f"no arm helps: every change made steps slower (best {best['arm']}, {best['vs_a']:.0%} of the job's)"
    else:
        text = (f"no difference beyond the rounds' spread: the best arm, {best['arm']}, took {best['vs_a']:.0%} of "
                f"the job's step time (rounds {best['vs_a_min']:.0%}-{best['vs_a_max']:.0%})")
    if best.get("losses"):
        text += f"; {best['losses']['text']}"
    return text, shape


def try_fix(target: LaunchTarget, cause: Cause, *, rounds: int = 3, window_s: float = 3.0,
            cancelled: Callable[[], bool] = lambda: False,
            progress: Callable[[str, dict[str, list[float]]], None] = lambda status, series: None) -> dict[str, Any]:
    """Run the cause's experiment; the report's `experiments` entry (ran: false with why, when it cannot)."""
    planned = plan(cause, cuda=bool((cause.experiment or {}).get("cuda_values")) and uses_cuda(target))
    if isinstance(planned, str):
        return {"cause": cause.id, "ran": False, "why": planned}
    if not target.alive():
        return {"cause": cause.id, "ran": False, "why": "the launched job has ended: no arm to compare with"}
    experiment = TurnExperiment(target, "as launched", [(arm.label, arm.change) for arm in planned])
    equivalence = (cause.experiment or {}).get("equivalence")
    experiment.want_losses = equivalence is not None
    try:
        arms: Arms = experiment.run(rounds=rounds, window_s=window_s, cancelled=cancelled, progress=progress)
    except ExperimentFailed as err:
        return {"cause": cause.id, "ran": False, "why": str(err)}
    rows = arms.rows()
    for row, arm in zip(rows[1:], planned, strict=True):
        if arm.setting is not None:
            row["setting"], row["value"] = arm.setting, arm.value
    for row, key in zip(rows, arms.labels, strict=True):
        applied = experiment.applied.get(key)
        row["applied"] = sorted({f"{a['name'].rsplit('.', 1)[-1]}={a['value']} at {a['where']}"
                                 for a in applied or []})[:5]
        if key != "a" and applied == [] and "FIELDGUIDE_OVERRIDES" in experiment.changes[key]:
            row["applied"] = ["nowhere: the job made no call the override changes"]
    if equivalence is not None:
        rtol = float(equivalence.get("rtol", DEFAULT_RTOL))
        for row, key in zip(rows[1:], list(arms.labels)[1:], strict=True):
            row["losses"] = compare_losses(experiment.losses.get("a", {}), experiment.losses.get(key, {}), rtol)
    text, shape = verdict(rows, (cause.experiment or {}).get("override"))
    return {"cause": cause.id, "ran": True, "rounds": rounds, "arms": rows, "verdict": text, "shape": shape,
            "how": "relaunched with the environment of each arm (FIELDGUIDE_OVERRIDES applies the change in "
                   "the agent, no edit to the script), timed in turns with the other arms paused"}
