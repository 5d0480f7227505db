"""Compiled against eager, by experiment: the same command relaunched with compilation off."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_AGENT, NEEDS_LAUNCH, NEEDS_PROCESS, Probe, ProbeContext

EAGER = {"TORCH_COMPILE_DISABLE": "1"}  # torch._dynamo.config.disable: torch.compile returns the function


@register
class CompileSpeed(Probe):
    id = "compile.speed"
    evidence_kinds = (ev.COMPILED_MS, ev.EAGER_MS, ev.TURNS)
    title = "Compiled vs eager steps, side by side: the command relaunched with TORCH_COMPILE_DISABLE=1"
    needs = frozenset({NEEDS_PROCESS, NEEDS_LAUNCH, NEEDS_AGENT})
    params = {"rounds": 5, "window": 2.0}
    values = {"compiled_step_ms": "ms", "eager_step_ms": "ms", "speedup": "x", "speedup_min": "x",
              "speedup_max": "x", "rounds": "", "compiled_steps": "", "eager_steps": "", "payback_steps": ""}
    series = {"compiled_ms": "ms", "eager_ms": "ms"}

    def run(self, ctx: ProbeContext, rounds: int = 5, window: float = 2.0) -> Measurement:
        from fieldguide.experiments.experiment import ABExperiment, ExperimentFailed
        from fieldguide.targets import LaunchTarget

        started = time.monotonic()
        target = ctx.target
        if not isinstance(target, LaunchTarget):
            return self.cannot("only a launched job can be relaunched")
        if not target.alive():
            return self.cannot(f"{target.gone_reason()}: no compiled arm left to time", applicable=False)
        if target.base_env.get("TORCH_COMPILE_DISABLE") == "1":
            return self.cannot("the job runs with TORCH_COMPILE_DISABLE=1 already: nothing compiled to compare")
        experiment = ABExperiment(target, EAGER, "compiled (as launched)", "eager (TORCH_COMPILE_DISABLE=1)")

        def progress(status: str, series: dict[str, list[float]]) -> None:
            self.reading(ctx, elapsed=time.monotonic() - started, of=min(ctx.budget_left, 40.0), status=status,
                         series={"compiled_ms": series.get("a_ms", []), "eager_ms": series.get("b_ms", [])}
                         if series else None)

        try:
            result = experiment.run(rounds=rounds, window_s=window, ready_timeout=min(30.0, ctx.budget_left / 2),
                                    cancelled=ctx.cancelled.is_set, progress=progress)
        except ExperimentFailed as err:
            return self.cannot(str(err), seconds=time.monotonic() - started)
        seconds = time.monotonic() - started
        summary = result.summary()
        if not summary["rounds"]:
            return self.cannot("no round timed steps in both arms", seconds=seconds)
        values: dict[str, Any] = {
            "compiled_step_ms": summary["a_step_ms"], "eager_step_ms": summary["b_step_ms"],
            "speedup": summary["ratio"], "speedup_min": summary["ratio_min"], "speedup_max": summary["ratio_max"],
            "rounds": summary["rounds"], "compiled_steps": summary["a_steps"], "eager_steps": summary["b_steps"],
            "payback_steps": self._payback(ctx, summary),
        }
        missing = {}
        if values["payback_steps"] is None:
            missing["payback_steps"] = "compiled is not faster: its compile time is never paid back"
        evidence = {"compiled_ms": result.steps("a")[-200:], "eager_ms": result.steps("b")[-200:],
                    "turns": [{"arm": t.arm, "steps": len(t.step_ms), "seconds": round(t.ended - t.started, 2)}
                              for t in result.turns]}
        return self.measurement(values=values, missing=missing, evidence=evidence, seconds=seconds,
                                provenance=f"A/B: the launched job vs the same command with TORCH_COMPILE_DISABLE=1, "
                                           f"{summary['rounds']} rounds taken in turns (the other arm paused), "
                                           "steps timed by the agent in both; speedup = eager / compiled time per "
                                           "step (each turn's mean, the median over turns), its min-max over rounds")

    @staticmethod
    def _payback(ctx: ProbeContext, summary: dict[str, Any]) -> int | None:
        """Steps until the compile time is won back by faster steps."""
        a, b = summary["a_step_ms"], summary["b_step_ms"]
        if not a or not b or b <= a or ctx.measure is None:
            return None
        activity = ctx.measure("compile.activity", {})
        compile_s = activity.values.get("compile_s") if activity.ok else None
        return round(compile_s * 1000 / (b - a)) if compile_s else None
