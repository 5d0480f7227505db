"""torch.compile from the inside: is the job compiling, what broke, what recompiled, what it costs,
and does the compiled model compute what the eager one does (agent capability `compile`)."""

from __future__ import annotations

import time
from typing import Any

from fieldguide.agent.channel import AgentConnection
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.compile_records import (
    break_rows,
    cache_counts,
    caches_disabled,
    compile_seconds,
    frames_from,
    phases,
    recompile_rows,
    steady_step_ms,
    timeline,
)
from fieldguide.probes.opprofile import ask_profile

PROFILE_STEPS = 5
COLD_EVERY_RUN_S = 5.0  # compiling this long in every run, for lack of a cache, is worth a cache


class CompileRecords:
    """The compile streams of one connection, read once."""

    def __init__(self, conn: AgentConnection) -> None:
        self.metrics = list(conn.stream("compile", "metrics").items)
        self.compiles = list(conn.stream("compile", "compiles").items)
        states = conn.stream("compile", "state").items
        self.state: dict[str, Any] = states[-1] if states else {}
        self.config: dict[str, Any] = self.state.get("config") or {}
        self.frames = frames_from(self.metrics)

    @property
    def compiled(self) -> bool:
        return bool(self.metrics or self.compiles or (self.state.get("frames") or {}).get("total"))


class CompileProbe(AgentProbe):
    capability = "compile"
    reads_history = True

    def records(self, ctx: ProbeContext) -> tuple[AgentConnection | None, CompileRecords | Measurement]:
        conn = self.connection(ctx)
        if conn is None:
            return None, self.cannot("the in-process agent is not connected")
        lacking = self.lacks_capability(conn)
        if lacking:
            return conn, self.cannot(lacking)
        self.hook_failures(ctx, conn)
        return conn, CompileRecords(conn)

    def watch(self, ctx: ProbeContext, seconds: float, status: str) -> float:
        """Let the job run for `seconds` (unless it ended), streaming progress."""
        started = time.monotonic()
        seconds = min(seconds, max(ctx.budget_left - 1, 0))
        while ctx.target.alive() and time.monotonic() - started < seconds:
            self.reading(ctx, elapsed=time.monotonic() - started, of=seconds, status=status)
            if not ctx.sleep(0.25):
                break
        return time.monotonic() - started


@register
class CompileActivity(CompileProbe):
    id = "compile.activity"
    evidence_kinds = (ev.FRAMES, ev.CONFIG, ev.TORCH_TRACE)
    title = "What torch.compile compiled, how long it took by phase, and when the steps became steady"
    params = {"seconds": 2.0}
    values = {
        "compiled": "", "frames": "", "graphs": "", "compile_s": "s", "dynamo_s": "s", "aot_s": "s",
        "inductor_s": "s", "cache_hits": "", "cache_misses": "", "caches_disabled": "", "first_step_s": "s",
        "steady_from_step": "", "steady_step_ms": "ms", "run_s": "s", "compile_fraction_of_run": "fraction",
        "run_ended": "", "compiled_longer_than_trained": "", "cold_every_run": "", "compile_in_steps": "",
    }

    def run(self, ctx: ProbeContext, seconds: float = 2.0) -> Measurement:
        started = time.monotonic()
        conn, got = self.records(ctx)
        if isinstance(got, Measurement):
            return got
        self.watch(ctx, seconds, "reading what torch.compile compiled")
        assert conn is not None
        records = CompileRecords(conn)
        ended = not ctx.target.alive()
        now = (conn.closed_at or time.monotonic()) if ended else time.monotonic()
        t0 = conn.hello.get("t") or conn.connected_at
        steps = list(conn.steps)
        steps_before = conn.steps_total - len(steps)
        compile_s = compile_seconds(records.compiles, records.metrics)
        line = timeline(t0, now, steps, steps_before, records.compiles, compile_s)
        disabled = caches_disabled(records.config)
        steady_ms = steady_step_ms(steps, records.compiles[-1]["t_end"] if records.compiles else None)
        values: dict[str, Any] = {
            "compiled": records.compiled,
            "frames": len(records.frames),
            "graphs": sum(f.compiles for f in records.frames.values()),
            "compile_s": round(compile_s, 3),
            **phases(records.metrics),
            **cache_counts(records.metrics),
            "caches_disabled": disabled,
            "first_step_s": round(line.first_step_s, 3) if line.first_step_s is not None else None,
            "steady_from_step": line.steady_from_step,
            "steady_step_ms": steady_ms,
            "run_s": round(line.run_s, 3),
            "compile_fraction_of_run": round(compile_s / line.run_s, 3) if line.run_s else None,
            "run_ended": ended,
            # Only a job that ended shows how long it trained: a running one may yet pay its compile back.
            "compiled_longer_than_trained": ended and compile_s > line.train_s,
            "cold_every_run": disabled and compile_s >= COLD_EVERY_RUN_S,
            "compile_in_steps": round(compile_s * 1000 / steady_ms) if steady_ms else None,
        }
        missing = {}
        if line.first_step_s is None:
            missing["first_step_s"] = "the first steps were not recorded" if steps else "no training step yet"
        evidence = {"frames": [{"frame": f.id, "function": f.name, "where": f.where, "graphs": f.compiles,
                                "recompiles": f.recompiles, "compile_s": round(f.compile_s, 3)}
                               for f in records.frames.values()][:30],
                    "config": records.config,
                    "torch_trace": records.config.get("torch_trace")}
        scope = "the whole run, ended" if ended else f"the run so far ({line.run_s:.0f} s; still running)"
        return self.measurement(values=values, missing=missing, evidence=evidence,
                                seconds=time.monotonic() - started,
                                provenance=f"agent: dynamo compile callbacks and compilation metrics; {scope}")


@register
class CompileBreaks(CompileProbe):
    id = "compile.breaks"
    evidence_kinds = (ev.TABLE, ev.REASONS)
    title = "Graph breaks: where in the user's code, why, and how many run in every step (profiler)"
    params = {"steps": PROFILE_STEPS}
    values = {"graph_breaks": "", "breaks_per_step": "", "graphs_per_step": "", "break_at": "", "break_reason": ""}

    def run(self, ctx: ProbeContext, steps: int = PROFILE_STEPS) -> Measurement:
        started = time.monotonic()
        conn, got = self.records(ctx)
        if isinstance(got, Measurement):
            return got
        rows = break_rows(got.frames, None, 0)
        regions: dict[str, int] | None = None
        profiled = 0
        missing: dict[str, str] = {}
        provenance = "agent: dynamo's compilation records (a resume function starts at each break's line)"
        if rows and ctx.target.alive():
            self.reading(ctx, status=f"profiling {steps} steps for the compiled graphs each step runs")
            reply = ask_profile(ctx.target.agent, steps, min(30.0, ctx.budget_left))
            if reply.ok:
                profile = reply.result.get("profile") or {}
                regions, profiled = profile.get("compiled_regions") or {}, int(profile.get("steps") or steps)
                provenance += f"; torch.profiler over {profiled} steps: compiled regions run per step"
            else:
                missing["breaks_per_step"] = f"the profile failed: {reply.error}"
        elif rows:
            missing["breaks_per_step"] = "the job ended: no step left to profile"
        rows = break_rows(got.frames, regions, profiled)
        values: dict[str, Any] = {"graph_breaks": len(rows), "break_at": rows[0]["where"] if rows else None,
                                  "break_reason": rows[0]["reason"] if rows else None,
                                  "graphs_per_step": round(sum(regions.values()) / profiled, 2)
                                  if regions and profiled else None}
        if not rows:
            values["breaks_per_step"] = 0.0
        elif regions is not None:
            values["breaks_per_step"] = round(sum(r["per_step"] or 0.0 for r in rows), 2)
            hot = [r for r in rows if r["per_step"]]
            if hot:
                values["break_at"], values["break_reason"] = hot[0]["where"], hot[0]["reason"]
        if rows and values["break_reason"] is None:  # a break dynamo records no reason for (a branch on a tensor)
            values["break_reason"] = "dynamo recorded no reason (the TORCH_TRACE log shows the break)"
        counted = got.state.get("graph_breaks") or {}
        return self.measurement(values=values, missing=missing, seconds=time.monotonic() - started,
                                evidence={"table": rows, "reasons": counted}, provenance=provenance)


@register
class CompileRecompiles(CompileProbe):
    id = "compile.recompiles"
    evidence_kinds = (ev.TABLE,)
    title = "Recompiles: how many, the guard that failed each time, and whether the recompile limit was hit"
    params = {"seconds": 3.0}
    values = {"recompiles": "", "recompiles_max_frame": "", "recompiles_in_window": "", "limit_hit": "",
              "recompile_reason": "", "recompiled_at": "", "recompile_limit": ""}

    def run(self, ctx: ProbeContext, seconds: float = 3.0) -> Measurement:
        conn, got = self.records(ctx)
        if isinstance(got, Measurement):
            return got
        assert conn is not None
        before = len(got.compiles)
        elapsed = self.watch(ctx, seconds, "watching for recompiles")
        records = CompileRecords(conn)
        frames = records.frames
        rows = recompile_rows(frames)
        window = [c for c in records.compiles[before:] if c.get("trigger") == "DYNAMO"
                  and not str(c.get("id", "")).endswith("/0")]
        limit_hit = any(f.limit_hit for f in frames.values()) or bool(records.state.get("limit_hits"))
        values = {
            "recompiles": sum(f.recompiles for f in frames.values()),
            "recompiles_max_frame": max((f.recompiles for f in frames.values()), default=0),
            "recompiles_in_window": len(window),
            "limit_hit": limit_hit,
            "recompile_reason": rows[0]["reason"] if rows else None,
            "recompiled_at": rows[0]["where"] if rows else None,
            "recompile_limit": records.config.get("recompile_limit"),
        }
        note = "; the limit was hit: that frame now runs EAGER, uncompiled, silently" if limit_hit else ""
        return self.measurement(values=values, evidence={"table": rows}, seconds=elapsed,
                                provenance=f"agent: dynamo compilation records, {elapsed:.1f} s watched{note}"
                                if elapsed else f"agent: dynamo compilation records{note}")


@register
class CompileEquivalence(CompileProbe):
    id = "compile.equivalence"
    evidence_kinds = (ev.TABLE,)
    title = "Compiled against eager on the job's own batch (no update, RNG and buffers restored)"
    reads_history = False
    params = {"timeout": 20.0}
    values = {"equivalent": "", "max_rel_error": "", "max_abs_error": "", "tolerance": "", "worst_output": "",
              "output_dtype": "", "module": "", "outputs_compared": "", "eager_call_ms": "ms",
              "compiled_call_ms": "ms"}

    def run(self, ctx: ProbeContext, timeout: float = 20.0) -> Measurement:
        started = time.monotonic()
        conn, got = self.records(ctx)
        if isinstance(got, Measurement):
            return got
        timeout = min(timeout, max(ctx.budget_left - 2, 1.0))
        self.reading(ctx, status="comparing the compiled module with its eager original on the next batch")
        reply = self.ask(ctx, {"timeout_s": timeout}, timeout=timeout + 5, name="equivalence")
        seconds = time.monotonic() - started
        if not reply.ok:
            return self.cannot(f"no comparison: {reply.error}", seconds=seconds)
        result = reply.result
        randoms = result.get("random_modules") or []
        if randoms:
            return self.cannot(f"the model has random ops active in training ({', '.join(randoms)}): compiled code "
                               "draws other random numbers than eager (inductor's RNG), so outputs cannot be "
                               "compared; set torch._inductor.config.fallback_random = True to compare",
                               seconds=seconds, applicable=False)
        worst = result.get("worst") or {}
        rows = result.get("outputs") or []
        values = {"equivalent": result.get("equivalent"), "max_rel_error": worst.get("max_rel"),
                  "max_abs_error": worst.get("max_abs"), "tolerance": worst.get("tolerance"),
                  "worst_output": worst.get("output"), "output_dtype": worst.get("dtype"),
                  "module": result.get("module"), "outputs_compared": len(rows),
                  "eager_call_ms": _round(result.get("eager_call_ms")),
                  "compiled_call_ms": _round(result.get("compiled_call_ms"))}
        return self.measurement(values=values, evidence={"table": rows}, seconds=seconds,
                                provenance=f"agent: the compiled {result.get('module')} and its eager original on "
                                           f"the same batch at step {result.get('step')}, no_grad, RNG and "
                                           "buffers restored; error relative to the largest eager value")


def _round(value: Any) -> Any:
    return round(value, 3) if isinstance(value, float) else value
