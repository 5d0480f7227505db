"""Memory from inside a launched job: growth step over step, the breakdown at peak, the OOM."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from fieldguide.agent.inside.rows import MemoryRow, RssRow
from fieldguide.analysis.stats import median
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.agent_probe import AgentProbe
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.loop import Background, step_rows
from fieldguide.probes.memory_math import (
    MB,
    fit_line,
    growth,
    mb,
    shares,
    slope_error,
    sustained_rate,
    tightest,
)

MIN_WINDOW_STEPS = 40  # a window long enough to see a per-step leak under allocator noise


def used_bytes(row: MemoryRow) -> int:
    """What a row's memory is: the CUDA allocator's when the job uses CUDA, else the resident set."""
    return int(row.cuda_allocated if row.cuda_allocated is not None else row.rss or 0)


def kept_growth(kept: list[list[float]], census_rate: float) -> tuple[float, float, str]:
    """MB/min of tensors kept across steps, its margin (±), and how it was read.

    `kept` holds the agent's checkpoints over the window: [t, step, tensors, bytes] of the tensors
    made since the first census and already alive at that checkpoint, so the batch in flight at a
    boundary is never among them. Their bytes over time, fitted, are the growth; two standard
    errors of the slope, from their own scatter, its margin. With fewer than three points there
    is no scatter to read: the two censuses' difference, which may be one batch of a size that
    changes every step, is the reading and also its margin (measured longer, never rounded to 0)."""
    if len(kept) >= 3:
        ts, ys = [float(p[0]) for p in kept], [float(p[3]) for p in kept]
        slope, _ = fit_line(ts, ys)
        se = slope_error(ts, ys, slope)
        return max(slope, 0.0) * 60 / MB, 2.0 * se * 60 / MB, f"{len(kept)} checkpoints of tensors kept across steps"
    return census_rate, census_rate, "two censuses (no checkpoints to give a scatter)"


def growth_values(result: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], dict[str, float]]:
    """Values from a `watch` reply: the sustained growth of use, and the tensors that grew;
    what could not be measured and why; the margins (±) of the readings that carry one."""
    rows = [r for r in map(MemoryRow.read, result.get("rows") or []) if r.rss]
    values: dict[str, Any] = {"steps_measured": len(rows)}
    missing: dict[str, str] = {}
    margins: dict[str, float] = {}
    steps = [float(r.step) for r in rows]
    used = [float(used_bytes(r)) for r in rows]
    per_step = growth(steps, used)
    per_second = growth([float(r.t) for r in rows], used)
    if per_step is None or per_second is None:
        why = f"{len(rows)} step boundaries in the window: too few to fit a trend"
        for key in ("growth_kb_per_step", "growth_mb_per_min", "growth_fit_r2"):
            missing[key] = why
    else:
        values["growth_kb_per_step"] = round((sustained_rate(per_step) or 0.0) / 1024, 2)
        values["growth_mb_per_min"] = round((sustained_rate(per_second) or 0.0) * 60 / MB, 2)
        values["growth_fit_r2"] = round(per_step.r2, 3)
        values["grew_mb"] = round(per_step.total / MB, 1)
    values["memory_kind"] = "CUDA allocated" if rows and rows[-1].cuda_allocated is not None else "RSS"
    values["used_mb"] = mb(used[-1]) if used else None
    census = result.get("census")
    span = (rows[-1].step - rows[0].step) if len(rows) > 1 else 0
    if census and span > 0:
        growing = result.get("growing") or []
        top = growing[0] if growing else None
        values["tensors_kept_per_step"] = round(top["added"] / span, 3) if top else 0.0
        values["graph_nodes_kept_per_step"] = round(max(census[1]["graph_nodes"] - census[0]["graph_nodes"], 0) / span, 2)
        values["live_tensors"] = census[1]["tensors"]
        minutes = (rows[-1].t - rows[0].t) / 60
        if minutes > 0:
            census_rate = max(census[1]["bytes"] - census[0]["bytes"], 0) / MB / minutes
            values["census_growth_mb_per_min"] = round(census_rate, 2)
            rate, margin, how = kept_growth(result.get("kept") or [], census_rate)
            values["tensor_growth_mb_per_min"] = round(rate, 2)
            margins["tensor_growth_mb_per_min"] = round(margin, 2)
            values["tensor_growth_from"] = how
        kept = result.get("kept_by") or {}
        if top:
            values["what_grows"] = f"{top['added']} x {top['what']} in {span} steps (+{mb(top['added_bytes'])} MB)"
            values["kept_by"] = kept.get("growing") or "not found"
        elif values["graph_nodes_kept_per_step"]:
            values["what_grows"] = (f"the autograd graph: +{census[1]['graph_nodes'] - census[0]['graph_nodes']} "
                                    f"nodes in {span} steps")
            values["kept_by"] = kept.get("graph") or "not found"
        else:
            values["what_grows"] = "nothing: the same live tensors at both ends"
            values["kept_by"] = "n/a"
        if census[1].get("graph_capped"):
            missing["graph_nodes_kept_per_step"] = (f"over {census[1]['graph_nodes']} autograd nodes alive at a step "
                                                    "boundary: the count stops there, so their growth is not seen")
            values.pop("graph_nodes_kept_per_step")
    else:
        why = "no second tensor census (no step boundary ended the window)" if not census else "one step only"
        for key in ("tensors_kept_per_step", "graph_nodes_kept_per_step", "tensor_growth_mb_per_min"):
            missing[key] = why
    return values, missing, margins


@register
class MemoryGrowth(AgentProbe):
    id = "memory.growth"
    evidence_kinds = (ev.CENSUS, ev.GROWING, ev.KEPT_BY, ev.ROWS)
    title = "Memory step over step inside the job, and the live tensors that accumulate"
    capability = "memory"
    params = {"seconds": 8.0}
    values = {"growth_mb_per_min": "MB/min", "growth_kb_per_step": "KB", "growth_fit_r2": "", "grew_mb": "MB",
              "tensors_kept_per_step": "", "graph_nodes_kept_per_step": "", "tensor_growth_mb_per_min": "MB/min",
              "census_growth_mb_per_min": "MB/min", "tensor_growth_from": "", "what_grows": "", "kept_by": "",
              "memory_kind": "", "used_mb": "MB", "steps_measured": "", "live_tensors": ""}
    series = {"used_mb": "MB"}

    def run(self, ctx: ProbeContext, seconds: float = 8.0) -> Measurement:
        started = time.monotonic()
        conn = self.connection(ctx)
        failures = self.hook_failures(ctx, conn)
        if conn is None:
            return self.cannot("the in-process agent is not connected")
        step_s = median([row.wall_s for row in step_rows(list(conn.steps)[-20:])]) if conn.steps else None
        window = max(seconds, MIN_WINDOW_STEPS * (step_s or 0.0))
        window = min(window, max(ctx.budget_left - 4.0, 1.0))
        asking = Background("fieldguide-memory-watch",
                            lambda: self.ask(ctx, {"seconds": window}, timeout=window + 20.0, name="watch"))
        rows = conn.stream(self.capability, "steps")
        while asking.alive():
            asking.result(0.5)
            recent = [used_bytes(r) / MB for r in map(MemoryRow.read, list(rows.items)[-60:]) if r.rss]
            self.reading(ctx, elapsed=time.monotonic() - started, of=window, series={"used_mb": recent})
        reply = asking.result(0.0)
        if reply is None:
            why = asking.error
            return self.cannot(f"the agent's memory watch failed: {type(why).__name__}: {why}" if why else
                               "the agent's memory watch did not reply", seconds=time.monotonic() - started)
        if not reply.ok:
            return self.cannot(reply.error, seconds=time.monotonic() - started)
        values, missing, margins = growth_values(reply.result)
        provenance = ("agent: RSS (/proc/self/statm) or torch.cuda.memory_stats at each step boundary; "
                      "a census of live tensors (gc) at the window's first and last boundary; tensors kept "
                      "across steps (by identity) at boundaries spread over the window")
        if failures:
            provenance += f"; hooks that did not install: {'; '.join(failures)}"
        evidence = {k: reply.result.get(k) for k in ("census", "growing", "kept_by")}
        evidence["rows"] = reply.result.get("rows", [])[-200:]
        return self.measurement(values=values, missing=missing, margins=margins, evidence=evidence,
                                seconds=time.monotonic() - started, provenance=provenance)


def breakdown_values(b: dict[str, Any]) -> dict[str, Any]:
    """Values from a breakdown (at a step, or at the OOM): categories, their shares, the limit."""
    share, dominant = shares(b)
    values: dict[str, Any] = {
        "oom": b.get("at") == "oom",
        "parameters_mb": mb(b.get("parameters")), "gradients_mb": mb(b.get("gradients")),
        "optimizer_state_mb": mb(b.get("optimizer_state")), "activations_mb": mb(b.get("activations")),
        "other_mb": mb(b.get("other_tensors")), "dominant": dominant,
        "dominant_share": round(share[dominant], 3) if dominant else None,
        "requested_mb": mb(b.get("requested")),
    }
    for key in ("activations", "optimizer_state", "parameters", "other"):
        values[f"{key}_share"] = round(share.get(key, 0.0), 3)
    cuda = b.get("cuda")
    if cuda:  # the device is what runs out: its total is the limit, the allocator's peak the use
        limit = {"kind": f"GPU {cuda.get('device')} memory", "limit": cuda["total"], "peak": cuda["reserved_peak"],
                 "fraction": cuda["reserved_peak"] / cuda["total"] if cuda["total"] else None}
    else:
        limit = tightest(b.get("limits") or []) or {}
    values["limit"] = limit.get("kind")
    values["limit_mb"] = mb(limit.get("limit"))
    values["peak_mb"] = mb(limit.get("peak"))
    fraction = limit.get("fraction")
    values["peak_fraction_of_limit"] = round(fraction, 3) if fraction is not None else None
    if limit.get("limit") and limit.get("peak") is not None:
        values["headroom_mb"] = mb(max(limit["limit"] - limit["peak"], 0))
    return values


MEMORY_VIZ = "https://pytorch.org/memory_viz (drop the file on it)"


def keep_snapshot(path: str | None, folder: Path | None) -> str | None:
    """The agent's allocator snapshot, copied into the walk's folder for viewers (the job's temp
    dir goes with it), else beside the user: open it at https://pytorch.org/memory_viz."""
    if not path or not os.path.exists(path):
        return None
    kept = str(folder / os.path.basename(path)) if folder is not None else \
        os.path.abspath(f"fieldguide-{os.path.basename(path)}")
    try:
        shutil.copyfile(path, kept)
    except OSError:
        return None
    return kept


def no_snapshot_why(b: dict[str, Any], history_armed: bool) -> str:
    """Why an out-of-memory walk leaves no allocator snapshot: memory_viz reads the CUDA
    allocator's, which a CPU job does not have, and which records history only when armed."""
    if not b.get("cuda"):
        return ("the job's tensors are in host memory: an allocator snapshot (memory_viz) exists only for "
                "CUDA memory; the breakdown chart shows what the memory holds")
    if not history_armed:
        return ("CUDA allocation history was not recorded, so there is no snapshot to dump: relaunch with "
                "`fieldguide diagnose --playbook oom --memory-history -- CMD` to record it from the job's start")
    return "the allocator's snapshot could not be written"


def describe_breakdown(values: dict[str, Any]) -> str:
    parts = [f"{k.replace('_mb', '').replace('_', ' ')} {values[k]} MB" for k in
             ("activations_mb", "optimizer_state_mb", "parameters_mb", "gradients_mb", "other_mb")
             if values.get(k) is not None]
    return ", ".join(parts)


@register
class MemoryBreakdown(AgentProbe):
    id = "memory.breakdown"
    evidence_kinds = (ev.BREAKDOWN, ev.MESSAGE, ev.RSS, ev.ARTIFACTS)
    title = "What memory holds at peak: activations, optimizer state, parameters, gradients, other"
    capability = "memory"
    reads_history = True  # an OOM that ended the job left its breakdown behind
    params = {"timeout": 20.0}
    values = {"oom": "", "peak_fraction_of_limit": "fraction", "limit": "", "limit_mb": "MB", "peak_mb": "MB",
              "headroom_mb": "MB", "dominant": "", "dominant_share": "fraction", "activations_share": "fraction",
              "optimizer_state_share": "fraction", "parameters_share": "fraction", "other_share": "fraction",
              "activations_mb": "MB", "optimizer_state_mb": "MB", "parameters_mb": "MB", "gradients_mb": "MB",
              "other_mb": "MB", "requested_mb": "MB", "breakdown": "", "snapshot": ""}
    parts = ("activations_share", "optimizer_state_share", "parameters_share", "other_share")

    def run(self, ctx: ProbeContext, timeout: float = 20.0) -> Measurement:
        started = time.monotonic()
        conn = self.connection(ctx)
        failures = self.hook_failures(ctx, conn)
        if conn is None:
            return self.cannot("the in-process agent is not connected")
        events = list(conn.stream(self.capability, "events").items)
        oom = next((e for e in events if e.get("event") == "oom"), None)
        if oom is not None:
            b, how = oom, f"at the out-of-memory error ({oom.get('error')}) in step {oom.get('step')}"
        elif not ctx.target.alive() and (ctx.target.ending() or {}).get("signal") == "SIGKILL":
            return self.killed(ctx, conn, started)
        elif not ctx.target.alive():
            return self.cannot(f"{ctx.target.gone_reason()} without running out of memory, before a breakdown "
                               "was taken", applicable=False)
        else:
            reply = self.ask(ctx, timeout=min(timeout, ctx.budget_left), name="breakdown")
            if not reply.ok:
                return self.cannot(reply.error, seconds=time.monotonic() - started)
            b, how = reply.result, f"over step {reply.result.get('step')}"
        values = breakdown_values(b)
        if b.get("activations") is None:
            values["activations_mb"] = None
        caught = [e for e in events if e.get("event") == "cuda_oom"]
        if caught and not values["oom"]:  # the job caught a CUDA OOM and went on
            values["oom"] = True
            values["requested_mb"] = mb(caught[-1].get("requested"))
        values["breakdown"] = describe_breakdown(values)
        snapshot = keep_snapshot(next((e.get("snapshot") for e in [b, *caught] if e.get("snapshot")), None),
                                 ctx.artifacts() if ctx.artifacts is not None else None)
        kept: list[dict[str, str]] = []
        if snapshot:
            values["snapshot"] = snapshot
            kept = [{"kind": "memory_snapshot", "path": snapshot, "open_with": MEMORY_VIZ}]
        elif values["oom"]:
            values["snapshot"] = f"none: {no_snapshot_why(b, bool(b.get('armed_history')))}"
        if b.get("tensor_bytes") == 0 and not any(b.get(k) for k in ("parameters", "activations", "other_tensors")):
            return self.cannot("the target holds no tensors: nothing of torch's to break down",
                               seconds=time.monotonic() - started)
        provenance = (f"agent: saved tensors of one step (saved_tensors_hooks, parameters' views left out), "
                      f"parameters, .grad and optimizer.state by unique storage, other live tensors (gc); "
                      f"limits from /proc and the cgroup, or the GPU's total; {how}")
        if failures:
            provenance += f"; hooks that did not install: {'; '.join(failures)}"
        evidence: dict[str, Any] = {"breakdown": {k: v for k, v in b.items() if k not in ("message",)},
                                    "message": b.get("message")}
        if kept:
            evidence["artifacts"] = kept
        return self.measurement(values=values, evidence=evidence, seconds=time.monotonic() - started,
                                provenance=provenance)


    def killed(self, ctx: ProbeContext, conn: Any, started: float) -> Measurement:
        """SIGKILL with no Python exception: the kernel's OOM killer's way (or a scheduler's)."""
        seen = list(conn.stream(self.capability, "rss").items)
        last = RssRow.read(seen[-1]) if seen else None
        values: dict[str, Any] = {"oom": True, "peak_mb": mb(last.rss) if last else None,
                                  "breakdown": "none: the job was killed without a Python exception"}
        where = f"; its last RSS seen was {values['peak_mb']} MB at step {last.step}" if last else ""
        no_breakdown = "the job was killed without a Python exception: nothing inside it could break memory down"
        missing = {key: no_breakdown for key in ("dominant", "peak_fraction_of_limit", "activations_share")}
        return self.measurement(values=values, missing=missing, evidence={"rss": seen[-30:]},
                                seconds=time.monotonic() - started,
                                provenance=f"the target was killed by SIGKILL{where}: the kernel's OOM killer does "
                                           "this when the machine or the job's cgroup runs out (dmesg names it)")


@register
class MemoryFragmentation(AgentProbe):
    id = "memory.fragmentation"
    evidence_kinds = (ev.CUDA,)
    title = "CUDA caching allocator: reserved against allocated, split blocks, allocation retries"
    capability = "memory"
    reads_history = True
    params = {}
    values = {"fragmented_fraction": "fraction", "reserved_mb": "MB", "allocated_mb": "MB",
              "inactive_split_mb": "MB", "alloc_retries": "", "ooms": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        started = time.monotonic()
        assert ctx.measure is not None
        breakdown = ctx.measure("memory.breakdown", {})
        if not breakdown.ok:
            return self.cannot(f"needs the breakdown: {breakdown.unavailable}", applicable=breakdown.applicable,
                               seconds=time.monotonic() - started)
        cuda = (breakdown.evidence.get("breakdown") or {}).get("cuda")
        if not cuda:
            return self.cannot("the job does not use CUDA: the CPU allocator keeps no reserved pool to fragment",
                               applicable=False, seconds=time.monotonic() - started)
        values = fragmentation_values(cuda)
        return self.measurement(values=values, evidence={"cuda": cuda}, seconds=time.monotonic() - started,
                                provenance="agent: torch.cuda.memory_stats() (reserved, allocated, "
                                           "inactive_split, num_alloc_retries), mem_get_info()")


def fragmentation_values(cuda: dict[str, Any]) -> dict[str, Any]:
    """Reserved but unallocated memory as a share of reserved, with the allocator's symptoms."""
    reserved = cuda.get("reserved_peak") or cuda.get("reserved") or 0
    allocated = cuda.get("allocated_peak") or cuda.get("allocated") or 0
    return {"fragmented_fraction": round((reserved - allocated) / reserved, 3) if reserved else 0.0,
            "reserved_mb": mb(reserved), "allocated_mb": mb(allocated),
            "inactive_split_mb": mb(cuda.get("inactive_split")), "alloc_retries": cuda.get("alloc_retries", 0),
            "ooms": cuda.get("ooms", 0)}
