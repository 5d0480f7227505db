"""torch.compile seen from outside (attach mode): what py-spy's stacks can decide.

Stacks show compiled code running (dynamo's frame wrapper, inductor's generated modules) and
the compiler at work (dynamo tracing, AOT autograd, inductor's code generation). That decides
whether the job uses torch.compile at all, and, in a job past its start-up, whether it is
still compiling in its steady loop (recompiles). What it cannot decide: breaks per step,
guard failures, equivalence, the speed-up (those need the agent: launch mode).
"""

from __future__ import annotations

import time

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext

STARTUP_S = 60.0  # a younger job may still be in its first compiles: compiling is no recompile yet


@register
class CompileOutside(Probe):
    id = "compile.outside"
    evidence_kinds = (ev.SAMPLES,)
    title = "Time inside torch.compile's compiler and inside compiled code, from py-spy stacks"
    needs = frozenset({NEEDS_PROCESS})
    values = {"uses_compile": "", "compiling_fraction": "fraction", "compiled_code_fraction": "fraction",
              "steady_compiling_fraction": "fraction", "process_age_s": "s"}

    def run(self, ctx: ProbeContext) -> Measurement:
        import psutil

        started = time.monotonic()
        if ctx.measure is None:
            return self.cannot("no stack sampler in this walk")
        stacks = ctx.measure("stacks.sample", {})
        if not stacks.ok:
            return self.cannot(f"stacks.sample: {stacks.unavailable}", seconds=time.monotonic() - started)
        compiling = stacks.values.get("compiling_fraction") or 0.0
        compiled = stacks.values.get("compiled_code_fraction") or 0.0
        try:
            age = time.time() - psutil.Process(ctx.target.pid).create_time() if ctx.target.pid else None
        except psutil.Error:
            age = None
        values = {"uses_compile": compiling + compiled > 0, "compiling_fraction": compiling,
                  "compiled_code_fraction": compiled, "process_age_s": round(age, 1) if age is not None else None,
                  "steady_compiling_fraction": compiling if age is not None and age >= STARTUP_S else None}
        missing = {}
        if values["steady_compiling_fraction"] is None:
            missing["steady_compiling_fraction"] = (f"the job is {age:.0f} s old: its first compiles may still be "
                                                    "running, which stacks cannot tell from recompiles"
                                                    if age is not None else "the job's age is unknown")
        return self.measurement(values=values, missing=missing, seconds=time.monotonic() - started,
                                evidence={"samples": stacks.values.get("samples")},
                                provenance=f"{stacks.provenance}; main-thread samples in torch/_dynamo, "
                                           "torch/_inductor and AOT autograd compile frames vs compiled code")
