"""A/B experiments on a launched job: the job as launched against the same command with one change.

The change is an environment (`TORCH_COMPILE_DISABLE=1`, say): fieldguide relaunches the
command with it, its agent loaded, and no edit to the script. The two arms never share the
CPU: while one is measured the other is paused (SIGSTOP to its process group, SIGCONT after),
and they take turns, A B B A ..., so that drift on a noisy machine falls on both. Each turn
times the steps that began and ended inside it, the same way for both arms (the agent's step
boundaries); the result is each arm's median with the spread of the per-round ratios.
Launch mode only: an attached job is never paused, and fieldguide cannot relaunch it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.probes.stats import median, quantile
from fieldguide.targets import LaunchTarget

SETTLE_S = 0.3  # after a resume, before timing: the first step resumed spans the pause


@dataclass
class Turn:
    arm: str  # "a" | "b"
    started: float
    ended: float
    step_ms: list[float] = field(default_factory=list)


@dataclass
class ABResult:
    label_a: str
    label_b: str
    turns: list[Turn]

    def steps(self, arm: str) -> list[float]:
        return [ms for t in self.turns if t.arm == arm for ms in t.step_ms]

    def median_ms(self, arm: str) -> float | None:
        return median(self.steps(arm))

    def ratios(self) -> list[float]:
        """Per round, B's median over A's (>1: A is faster)."""
        a_turns = [t for t in self.turns if t.arm == "a" and t.step_ms]
        b_turns = [t for t in self.turns if t.arm == "b" and t.step_ms]
        found = []
        for a, b in zip(a_turns, b_turns, strict=False):  # a cancelled run may end mid-round
            ma, mb = median(a.step_ms), median(b.step_ms)
            if ma and mb:
                found.append(mb / ma)
        return found

    def summary(self) -> dict[str, Any]:
        ratios = self.ratios()
        a, b = self.median_ms("a"), self.median_ms("b")
        return {"a_step_ms": _r(a), "b_step_ms": _r(b), "ratio": _r(b / a) if a and b else None,
                "ratio_min": _r(min(ratios)) if ratios else None, "ratio_max": _r(max(ratios)) if ratios else None,
                "ratio_q1": _r(quantile(ratios, 0.25)), "ratio_q3": _r(quantile(ratios, 0.75)),
                "rounds": len(ratios), "a_steps": len(self.steps("a")), "b_steps": len(self.steps("b"))}


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


class ExperimentFailed(Exception):
    """The experiment could not be run; the message says why in one line."""


class ABExperiment:
    def __init__(self, target: LaunchTarget, change: dict[str, str], label_a: str, label_b: str) -> None:
        self.target = target
        self.change = change
        self.label_a, self.label_b = label_a, label_b
        self.relaunched: LaunchTarget | None = None

    def run(self, *, rounds: int = 3, window_s: float = 3.0, warmup_steps: int = 5, ready_timeout: float = 30.0,
            cancelled: Callable[[], bool] = lambda: False,
            progress: Callable[[str, dict[str, list[float]]], None] = lambda status, series: None) -> ABResult:
        if not self.target.alive():
            raise ExperimentFailed("the launched job has ended: there is no arm A to measure")
        progress(f"relaunching the command with {_env_text(self.change)}", {})
        try:
            self.relaunched = LaunchTarget(self.target.cmd, env=self.target.relaunch_env(self.change))
        except Exception as err:
            raise ExperimentFailed(f"could not relaunch the command: {err}") from None
        b = self.relaunched
        try:
            if not b.wait_ready(timeout=ready_timeout, min_steps=warmup_steps + 2):
                raise ExperimentFailed(f"the relaunched job ran no {warmup_steps + 2} steps within {ready_timeout:.0f} s")
            window = self._window(window_s)
            turns: list[Turn] = []
            order = [arm for i in range(rounds) for arm in (("a", "b") if i % 2 == 0 else ("b", "a"))]
            b.pause()
            for arm in order:
                if cancelled():
                    break
                running, paused = (self.target, b) if arm == "a" else (b, self.target)
                paused.pause()
                running.resume()
                turn = self._turn(arm, running, window, cancelled)
                turns.append(turn)
                progress(f"{self.label_a if arm == 'a' else self.label_b}: {len(turn.step_ms)} steps timed",
                         {"a_ms": self._steps_of(turns, "a"), "b_ms": self._steps_of(turns, "b")})
            return ABResult(self.label_a, self.label_b, turns)
        finally:
            self.target.resume()
            b.resume()
            b.close()

    def _window(self, window_s: float) -> float:
        """Long enough for about ten steps of the slower arm, at least `window_s`."""
        typical = []
        for target in (self.target, self.relaunched):
            conn = target.agent.primary() if target is not None and target.agent else None
            if conn is not None:
                typical.append(median([r[1] for r in list(conn.steps)[-10:]]) or 0.0)
        return min(max(window_s, 10 * max(typical, default=0.0)), 15.0)

    @staticmethod
    def _steps_of(turns: list[Turn], arm: str) -> list[float]:
        return [ms for t in turns if t.arm == arm for ms in t.step_ms][-60:]

    @staticmethod
    def _turn(arm: str, target: LaunchTarget, window: float, cancelled: Callable[[], bool]) -> Turn:
        time.sleep(SETTLE_S)
        started = time.monotonic()
        while time.monotonic() - started < window and target.alive() and not cancelled():
            time.sleep(0.05)
        ended = time.monotonic()
        conn = target.agent.primary() if target.agent else None
        rows = list(conn.steps) if conn is not None else []
        # Steps that began and ended inside the turn: none spans a pause.
        step_ms = [round(r[1] * 1000, 3) for r in rows if r[0] <= ended and r[0] - r[1] >= started]
        return Turn(arm=arm, started=started, ended=ended, step_ms=step_ms)


def _env_text(change: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in change.items())
