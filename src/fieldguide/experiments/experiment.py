"""A/B experiments on a launched job: the job as launched against the same command with one change.

The change is an environment (`TORCH_COMPILE_DISABLE=1`, say): fieldguide relaunches the
command with it, its agent loaded, and no edit to the script. The two arms never share the
CPU: while one is measured the other is paused (SIGSTOP to its process group, SIGCONT after),
and they take turns, A B B A ..., so that drift on a noisy machine falls on both. Each turn
times the steps that began and ended inside it, the same way for every arm (the agent's step
boundaries). A turn's time per step is its mean (its throughput); an arm's is the median over
its turns, with the quartiles and the min-max of the same turn means as its spread (never the
single steps': a loader with workers hands out batches in bursts, so most single steps take a
millisecond and a few take the wait, and their quartiles need not contain the median); its
ratio to the job as launched has the min-max of the per-round ratios.
Launch mode only: an attached job is never paused, and fieldguide cannot relaunch it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.agent.inside.rows import StepRow
from fieldguide.analysis.stats import median, quantile
from fieldguide.experiments.equivalence import losses_of
from fieldguide.targets import LaunchTarget

SETTLE_S = 0.3  # at least this after a resume, before timing: the first step resumed spans the pause
DRAIN_SHARE = 0.4  # of a turn's window, spent after a resume before its steps are timed


@dataclass
class Turn:
    arm: str  # "a" | "b"
    started: float
    ended: float
    step_ms: list[float] = field(default_factory=list)
    peak_rss_mb: float | None = None  # the job's processes (workers too) at their largest in the turn
    peak_cuda_mb: float | None = None  # the CUDA allocator's peak since the arm started (a GPU job)

    @property
    def mean_ms(self) -> float | None:
        """The turn's time per step: its throughput. Not the median: a loader with workers hands
        out batches in bursts (two ready at once, then a long wait), where the median misleads."""
        return sum(self.step_ms) / len(self.step_ms) if self.step_ms else None


@dataclass
class Arms:
    """What an experiment's turns timed, arm by arm ("a" is the job as launched)."""

    labels: dict[str, str]
    turns: list[Turn]

    def steps(self, arm: str) -> list[float]:
        return [ms for t in self.turns if t.arm == arm for ms in t.step_ms]

    def turn_means(self, arm: str) -> list[float]:
        """Each of the arm's turns' time per step (its mean), in the order they were timed."""
        return [t.mean_ms for t in self.turns if t.arm == arm and t.mean_ms is not None]

    def median_ms(self, arm: str) -> float | None:
        """The arm's time per step: the median over its turns of each turn's mean."""
        return median(self.turn_means(arm))

    def ratios(self, arm: str, against: str = "a") -> list[float]:
        """Per round, `arm`'s time per step over `against`'s (>1: `against` is faster)."""
        mine = [t for t in self.turns if t.arm == arm and t.step_ms]
        theirs = [t for t in self.turns if t.arm == against and t.step_ms]
        found = []
        for ours, base in zip(mine, theirs, strict=False):  # a cancelled run may end mid-round
            mo, mb = ours.mean_ms, base.mean_ms
            if mo and mb:
                found.append(mo / mb)
        return found

    def rows(self) -> list[dict[str, Any]]:
        """Per arm: its time per step (the median of its turns' means) with the quartiles and the
        min-max of those same turn means, the turns and steps timed, and its ratio to arm A
        (median and min-max over rounds)."""
        found = []
        for arm, label in self.labels.items():
            means = self.turn_means(arm)
            ratios = self.ratios(arm) if arm != "a" else []
            found.append({"arm": label, "step_ms": _r(median(means)), "step_ms_q1": _r(quantile(means, 0.25)),
                          "step_ms_q3": _r(quantile(means, 0.75)), "step_ms_min": _r(min(means, default=None)),
                          "step_ms_max": _r(max(means, default=None)), "turns": len(means),
                          "steps": len(self.steps(arm)),
                          "peak_rss_mb": max((t.peak_rss_mb for t in self.turns if t.arm == arm
                                              and t.peak_rss_mb is not None), default=None),
                          "peak_cuda_mb": max((t.peak_cuda_mb for t in self.turns if t.arm == arm
                                               and t.peak_cuda_mb is not None), default=None),
                          "vs_a": _r(median(ratios)) if ratios else None,
                          "vs_a_min": _r(min(ratios)) if ratios else None,
                          "vs_a_max": _r(max(ratios)) if ratios else None})
        return found

    def summary(self) -> dict[str, Any]:
        """Arm B against arm A: each median, B/A over all steps, and its min-max and quartiles over rounds."""
        ratios = self.ratios("b")
        a, b = self.median_ms("a"), self.median_ms("b")
        return {"a_step_ms": _r(a), "b_step_ms": _r(b), "ratio": _r(b / a) if a and b else None,
                "ratio_min": _r(min(ratios)) if ratios else None, "ratio_max": _r(max(ratios)) if ratios else None,
                "ratio_q1": _r(quantile(ratios, 0.25)), "ratio_q3": _r(quantile(ratios, 0.75)),
                "rounds": len(ratios), "a_steps": len(self.steps("a")), "b_steps": len(self.steps("b"))}


ABResult = Arms  # two arms: the launched job and one change


def _cuda_peak_mb(target: LaunchTarget, conn: Any, step_ms: list[float]) -> float | None:
    """The arm's CUDA allocator peak (max allocated, MB), asked while it still runs: the agent
    answers at its next step. None for a job on the CPU (the agent says it has no CUDA)."""
    if target.agent is None or conn is None or "cuda" not in conn.capabilities:
        return None
    typical_s = (median(step_ms) or 0.0) / 1000
    reply = target.agent.request("cuda", {}, timeout=min(max(1.0, 3 * typical_s), 10.0), name="peak")
    if not reply.ok:
        return None
    return round(float(reply.result.get("max_allocated", 0)) / 2**20, 1)


def _tree_rss_mb(pid: int | None) -> float | None:
    """Resident memory of a process and its children (DataLoader workers), in MB; None if gone.
    Memory causes are judged by their peak: an experiment reports each arm's beside its speed."""
    import psutil

    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in (root, *root.children(recursive=True))) / 2**20
    except psutil.Error:
        return None


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class ExperimentFailed(Exception):
    """The experiment could not be run; the message says why in one line."""


ARM_KEYS = "abcdefghij"


class TurnExperiment:
    """The launched job (arm "a") against relaunches of it, each with one change, in turns."""

    def __init__(self, target: LaunchTarget, label_a: str, variants: list[tuple[str, dict[str, str]]]) -> None:
        if not 1 <= len(variants) < len(ARM_KEYS):
            raise ValueError(f"an experiment has 1 to {len(ARM_KEYS) - 1} variants")
        self.target = target
        self.labels = {"a": label_a, **{ARM_KEYS[i + 1]: label for i, (label, _) in enumerate(variants)}}
        self.changes = {ARM_KEYS[i + 1]: change for i, (_, change) in enumerate(variants)}
        self.relaunched: dict[str, LaunchTarget] = {}
        self.applied: dict[str, list[dict[str, Any]]] = {}
        self.losses: dict[str, dict[str, Any]] = {}  # arm: its first losses (equivalence.losses_of)
        self.want_losses = False  # an equivalence check waits for every arm's losses

    def run(self, *, rounds: int = 3, window_s: float = 3.0, warmup_steps: int = 5, ready_timeout: float = 30.0,
            cancelled: Callable[[], bool] = lambda: False,
            progress: Callable[[str, dict[str, list[float]]], None] = lambda status, series: None) -> Arms:
        if not self.target.alive():
            raise ExperimentFailed("the launched job has ended: there is no arm A to measure")
        arms: dict[str, LaunchTarget] = {"a": self.target}
        alone_until = time.monotonic()  # arm A's steps until here ran with no relaunch beside it
        try:
            for key, change in self.changes.items():
                progress(f"relaunching the command with {_env_text(change)}", {})
                try:
                    arms[key] = self.relaunched[key] = LaunchTarget(self.target.cmd,
                                                                    env=self.target.relaunch_env(change))
                except Exception as err:
                    raise ExperimentFailed(f"could not relaunch the command: {err}") from None
                # One arm starts at a time: the others' start-up would slow its own.
                if not arms[key].wait_ready(timeout=ready_timeout, min_steps=warmup_steps + 2):
                    raise ExperimentFailed(f"the job relaunched with {_env_text(change)} ran no {warmup_steps + 2} "
                                           f"steps within {ready_timeout:.0f} s")
                arms[key].pause()
            window = self._window(window_s, arms, alone_until)
            keys = list(arms)
            turns: list[Turn] = []
            order = [keys[(i + j) % len(keys)] if i % 2 == 0 else keys[(i - j) % len(keys)]
                     for i in range(rounds) for j in range(len(keys))]
            for arm in order:
                if cancelled():
                    break
                for key, target in arms.items():
                    if key != arm:
                        target.pause()
                arms[arm].resume()
                turn = self._turn(arm, arms[arm], window, cancelled)
                turns.append(turn)
                progress(f"{self.labels[arm]}: {len(turn.step_ms)} steps timed",
                         {self.labels[key]: self._steps_of(turns, key) for key in keys})
            return Arms(dict(self.labels), turns)
        finally:
            self.target.resume()
            for target in self.relaunched.values():
                target.resume()
            if self.want_losses:
                self._read_losses({"a": self.target, **self.relaunched})
            for key, target in self.relaunched.items():
                conn = target.agent.primary() if target.agent else None
                if conn is not None:  # what the agent changed in that arm, before it is gone
                    self.applied[key] = list(conn.stream("overrides", "applied").items)
                target.close()

    def _read_losses(self, arms: dict[str, LaunchTarget], wait_s: float = 1.0) -> None:
        """Each arm's first losses; an arm paused before its agent's last flush gets a moment to send them."""
        deadline = time.monotonic() + wait_s
        while True:
            for key, target in arms.items():
                self.losses[key] = losses_of(target.agent.primary() if target.agent else None)
            if all(found["first"] for found in self.losses.values()) or time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    @staticmethod
    def _window(window_s: float, arms: dict[str, LaunchTarget], alone_until: float) -> float:
        """Long enough for about ten steps of the slowest arm, at least `window_s`, sized from steps
        that ran alone: arm A's before any relaunch, the fastest quarter of each relaunch's last
        steps (its warm-up ran beside arm A). Steps timed while both ran once sized an HF Trainer's
        turns from 1.3 s steps against 0.035 s steady ones: 14 s turns instead of 2 s."""
        typical = []
        for key, target in arms.items():
            conn = target.agent.primary() if target.agent else None
            if conn is None:
                continue
            rows = [StepRow.read(r) for r in list(conn.steps)]
            if key == "a":
                alone = [r.wall_s for r in rows if r.t_end <= alone_until][-10:]
                typical.append(median(alone or [r.wall_s for r in rows[-10:]]) or 0.0)
            else:
                typical.append(quantile([r.wall_s for r in rows[-10:]], 0.25) or 0.0)
        return min(max(window_s, 10 * max(typical, default=0.0)), 15.0)

    @staticmethod
    def _steps_of(turns: list[Turn], arm: str) -> list[float]:
        return [ms for t in turns if t.arm == arm for ms in t.step_ms][-60:]

    @staticmethod
    def _turn(arm: str, target: LaunchTarget, window: float, cancelled: Callable[[], bool]) -> Turn:
        # A paused job's waits go on (a sleep, a read in flight, its workers' prefetch finish while
        # it is stopped), so a resumed arm first drains work done for free: the first part of each
        # turn is not timed. What is timed: steps that began and ended inside the rest.
        resumed = time.monotonic()
        started = resumed + max(SETTLE_S, DRAIN_SHARE * window)
        peak: float | None = None
        while time.monotonic() - started < window and target.alive() and not cancelled():
            rss = _tree_rss_mb(target.pid)
            peak = rss if peak is None or (rss is not None and rss > peak) else peak
            time.sleep(0.05)
        ended = time.monotonic()
        conn = target.agent.primary() if target.agent else None
        rows = [StepRow.read(r) for r in list(conn.steps)] if conn is not None else []
        step_ms = [round(r.wall_s * 1000, 3) for r in rows if r.t_end <= ended and r.t_end - r.wall_s >= started]
        return Turn(arm=arm, started=started, ended=ended, step_ms=step_ms,
                    peak_rss_mb=round(peak, 1) if peak is not None else None,
                    peak_cuda_mb=_cuda_peak_mb(target, conn, step_ms))


class ABExperiment(TurnExperiment):
    """The launched job against the same command with one change."""

    def __init__(self, target: LaunchTarget, change: dict[str, str], label_a: str, label_b: str) -> None:
        super().__init__(target, label_a, [(label_b, change)])

    @property
    def relaunched_b(self) -> LaunchTarget | None:
        return self.relaunched.get("b")


def _env_text(change: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items())
