"""The step budget: every share of the training thread's time, named.

Each sample of the training thread (py-spy from outside, the same window in both modes) is given
one part of the step: forward, backward, the update, input (waiting for it or making it), file and
network I/O, collectives, host-device syncs, sleeps, waits on other threads, a framework's
bookkeeping, garbage collection, debug switches, compiling, tensor ops the loop calls outside
modules, or the job's own code, by the innermost frame that holds it (function, file:line). The
shares add up to 1 by construction; each carries its sampling margin. Pure functions.

The job's own code is split by the loop's source (loop_dataflow.py): a call whose result the step
reads is input (or a hand-written model), a block that reads `.grad` is a hand-written update, and
anything else the loop does each step is its own work beside the step (`loop_work`): metrics,
gc.collect(), callbacks, Python bookkeeping. That share is avoidable; the model's work is not.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fieldguide.probes import stack_categories as sc
from fieldguide.probes.loop_dataflow import LoopFlow
from fieldguide.probes.step_cycle import frame_line, is_library, loop_index
from fieldguide.probes.uncertainty import share_margin

# Part ids (stable: the JSON report carries them) and how a person reads them.
PARTS: dict[str, str] = {
    "forward": "forward",
    "backward": "backward",
    "update": "optimizer update",
    "input_wait": "waiting for input",
    "input_cpu": "making input (CPU)",
    "io": "file/network I/O",
    "collective": "collectives",
    "sync": "host-device syncs",
    "sleep": "sleeping",
    "lock_wait": "waiting on threads",
    "bookkeeping": "framework bookkeeping",
    "gc": "garbage collection",
    "debug": "debug switches",
    "compile": "compiling",
    "ops": "ops outside modules",
    "own_compute": "own code feeding the step",
    "loop_lines": "loop lines feeding the step",
    "loop_work": "loop's own work",
    "other": "elsewhere",
}
# The model's own work: what a faster device or a better kernel speeds up, never a cause here.
COMPUTE = frozenset({"forward", "backward", "update", "ops", "own_compute", "loop_lines"})
_BY_CATEGORY = {sc.FORWARD: "forward", sc.BACKWARD: "backward", sc.OPTIMIZER: "update", sc.DATA_WAIT: "input",
                sc.PRODUCE: "input", sc.STARTUP: "input", sc.IO: "io", sc.COLLECTIVE: "collective",
                sc.DEVICE_SYNC: "sync", sc.ANOMALY: "debug", sc.PROFILER: "debug"}
_GC_CALL = re.compile(r"\bgc\.collect\(")
# Lines of the job's own work are named one by one down to this share; the rest is summed.
NAMED_DOWN_TO = 0.02
MAX_NAMED = 6


@dataclass(frozen=True)
class BudgetLine:
    part: str  # a PARTS id
    share: float  # of the training thread's samples
    margin: float  # ± (two standard errors of a share of the samples)
    at: str | None = None  # the frame holding most of it: "weight_health (train.py:21)"
    on_cpu: float | None = None  # share of the line's samples on a CPU
    timed: bool = False  # the agent's timers, not the samples, gave this share

    @property
    def avoidable(self) -> bool:
        return self.part not in COMPUTE

    @property
    def label(self) -> str:
        return PARTS.get(self.part, self.part)

    def to_json(self) -> dict[str, Any]:
        row: dict[str, Any] = {"part": self.part, "label": self.label, "share": round(self.share, 4),
                               "margin": round(self.margin, 4), "avoidable": self.avoidable}
        if self.at:
            row["at"] = self.at
        if self.on_cpu is not None:
            row["on_cpu"] = round(self.on_cpu, 3)
        if self.timed:
            row["timed"] = True
        return row


@dataclass
class Place:
    """Where a sample of the job's own code is: which part, and the frame that names it."""

    part: str
    at: str | None = None
    # Lines of one function add up: the function the loop called ("weight_health (train.py)"), named
    # in the budget by its costliest line.
    group: str | None = None


def frame_name(func: str, file: str, line: int | None) -> str:
    return f"{func} ({os.path.basename(file)}{f':{line}' if line else ''})"


# py-spy's --nonblocking reads a running process, and its stacks tear: at 4-7 ms steps, half of
# the update's samples stood on the loop's line of a metrics callback, whose own samples held that
# line seven times as often. A line is the step's where the forward, backward and update samples
# are at least this share of all the samples standing on it (two at least, or all there are).
SINK_SHARE = 0.5


STEP_KINDS = (sc.FORWARD, sc.BACKWARD, sc.OPTIMIZER)


def sink_lines(samples: list[sc.ThreadSample], loop: sc.Frame, kinds: tuple[str, ...] = STEP_KINDS) -> set[int]:
    """The loop's lines its forward, backward and update samples (`kinds` of them) stand on:
    what the step is."""
    step: collections.Counter[int] = collections.Counter()
    every: collections.Counter[int] = collections.Counter()
    for s in samples:
        i = loop_index(s, loop)
        line = frame_line(s, i) if i is not None else None
        if not line:
            continue
        every[line] += s.count
        if s.category in kinds:
            step[line] += s.count
    return {line for line, n in step.items() if n >= SINK_SHARE * every[line] and (n >= 2 or n == sum(step.values()))}


Loops = list[tuple[sc.Frame, "LoopFlow | None"]]


def _user_callee(sample: sc.ThreadSample, i: int) -> tuple[str, str, int] | None:
    """The first frame of the job's own code below the loop's frame `i`, through library frames
    between them (the wrapper a `@torch.no_grad()` decorator puts around a function)."""
    for j in range(i + 1, len(sample.stack)):
        if not is_library(sample.stack[j]):
            line = frame_line(sample, j)
            return (sample.stack[j][0], sample.stack[j][1], line) if line else None
    return None


def update_call_lines(samples: list[sc.ThreadSample], loop: sc.Frame,
                      is_update: Callable[[str, str, int], bool]) -> set[int]:
    """The loop's lines that call the job's own update function (a hand-written `sgd.update()`,
    decorated or not), seen in the samples that stand in that function."""
    found = set()
    for s in samples:
        i = loop_index(s, loop)
        if i is None:
            continue
        line, callee = frame_line(s, i), _user_callee(s, i)
        if line and callee is not None and is_update(callee[1], callee[0], callee[2]):
            found.add(line)
    return found


def own_code_place(sample: sc.ThreadSample, loop: sc.Frame | None, flow: LoopFlow | None,
                   is_update: Callable[[str, str, int], bool], outer: Loops | None = None,
                   update_lines: set[int] | frozenset[int] = frozenset()) -> Place:
    """The part of a sample in the job's own code (category OTHER, not input, not a framework's).
    `outer`: the functions that call the loop, each with its flow (a `train_step` called from the
    real loop: what that loop does beside calling it is its own work too). `update_lines`: the
    loop's lines that call its own update (update_call_lines): a sample standing on one with no
    callee of the job's own (a `@torch.no_grad()` wrapper, the call being made, a torn stack) is
    the update too, not the loop's own work. Beside another job on a 2-core machine, the Python of
    a decorated hand-written update read as 21-31% loop work, against 4-7% alone."""
    if sample.leaf_source and _GC_CALL.search(sample.leaf_source):
        return Place("gc", frame_name(sample.stack[-1][0], sample.stack[-1][1], sample.leaf_line))
    leaf_func, leaf_file = sample.stack[-1] if sample.stack else ("?", "")
    if sample.stack and sc.in_torch(leaf_file) and not sc.is_stdlib(leaf_file):
        return Place("ops", None)
    i = loop_index(sample, loop) if loop is not None else None
    if i is None or loop is None:
        for frame, frame_flow in outer or []:
            if frame in sample.stack:
                place = own_code_place(sample, frame, frame_flow, is_update)
                return place if place.part in ("loop_work", "gc", "update") else Place("other", place.at)
        user = _innermost_user(sample)
        called = _called_by_framework(sample)
        if called is not None:  # a callback or hook of the job's, run by a trainer's loop
            return Place("loop_work", user, group=called)
        return Place("other", user)
    line = frame_line(sample, i)
    feeds = flow.feeds(line) if flow is not None else None
    callee = sample.stack[i + 1] if i + 1 < len(sample.stack) else None
    if flow is not None and line is not None and flow.updates(line):
        return Place("update", frame_name(loop[0], loop[1], line))
    if callee is not None and not is_library(callee):
        own = _innermost_user(sample)
        if feeds:
            return Place("own_compute", own)
        callee_line = frame_line(sample, i + 1)
        if callee_line and is_update(callee[1], callee[0], callee_line):
            return Place("update", own)
        if feeds is False:  # named by the function the loop called, at its line that spends it
            return Place("loop_work", frame_name(callee[0], callee[1], callee_line),
                         group=frame_name(callee[0], callee[1], None))
        return Place("other", own)
    at = frame_name(loop[0], loop[1], line)
    if line in update_lines:  # no callee, or the library's wrapper around the job's own update
        return Place("update", at)
    if feeds is False:
        return Place("loop_work", at)
    return Place("loop_lines" if feeds else "other", at)


_PACKAGE = re.compile(r"(?:site|dist)-packages/(?!torch/)")


def _called_by_framework(sample: sc.ThreadSample) -> str | None:
    """The job's own function that an installed package (not torch) called, when the sample is in
    it: a trainer's callback or hook ("on_step_end (train.py)"). None elsewhere."""
    for depth in range(len(sample.stack) - 1, 0, -1):
        func, file = sample.stack[depth]
        if is_library((func, file)):
            continue
        caller = sample.stack[depth - 1][1]
        if _PACKAGE.search(caller):
            return frame_name(func, file, None)
    return None


def _innermost_user(sample: sc.ThreadSample) -> str | None:
    for depth in range(len(sample.stack) - 1, -1, -1):
        func, file = sample.stack[depth]
        if not is_library((func, file)):
            return frame_name(func, file, frame_line(sample, depth))
    return None


Where = tuple[str | None, str | None]  # (group, at): see Place


def budget(parts: dict[str, collections.Counter[Where]], on_cpu: dict[str, int],
           samples: int) -> list[BudgetLine]:
    """Lines from sample counts per part (and per place within a part), largest first. The job's
    own work is named function by function (each by its costliest line); small ones are summed."""
    lines: list[BudgetLine] = []
    if samples <= 0:
        return lines
    for part, places in parts.items():
        total = sum(places.values())
        if not total:
            continue
        cpu = on_cpu.get(part)
        cpu_share = min(cpu / total, 1.0) if cpu is not None else None
        if part == "loop_work":
            groups: dict[str | None, collections.Counter[str | None]] = collections.defaultdict(collections.Counter)
            for (group, at), n in places.items():
                groups[group or at][at] += n
            rest, named = 0, 0
            for key, ats in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
                n = sum(ats.values())
                at = next((a for a, _ in ats.most_common() if a), None)
                if key is not None and at is not None and n / samples >= NAMED_DOWN_TO and named < MAX_NAMED:
                    lines.append(BudgetLine(part, n / samples, share_margin(n / samples, samples), at, cpu_share))
                    named += 1
                else:
                    rest += n
            if rest:
                lines.append(BudgetLine(part, rest / samples, share_margin(rest / samples, samples), None, cpu_share))
            continue
        at = next((a for (_, a), _ in places.most_common() if a), None)
        lines.append(BudgetLine(part, total / samples, share_margin(total / samples, samples), at, cpu_share))
    return sorted(lines, key=lambda line: -line.share)


def part_share(lines: list[BudgetLine], *parts: str) -> float:
    return sum(line.share for line in lines if line.part in parts)


def refine(lines: list[BudgetLine], timed: dict[str, float]) -> list[BudgetLine]:
    """The budget with the agent's exact timers in place of the samples' estimates of the same parts
    (`timed`: part -> share of wall time, e.g. input_wait + input_cpu from DataLoader.__next__, io from
    torch.save), the other lines scaled so that the shares still add up to 1."""
    if not timed:
        return lines
    groups = {"input": ("input_wait", "input_cpu")}
    replaced: set[str] = set()
    for part in timed:
        replaced |= set(groups.get(part, (part,)))
    kept = [line for line in lines if line.part not in replaced]
    rest = sum(line.share for line in kept)
    room = max(1.0 - sum(timed.values()), 0.0)
    scale = room / rest if rest > 0 else 0.0
    out = [BudgetLine(line.part, line.share * scale, line.margin, line.at, line.on_cpu) for line in kept]
    if rest <= 0 and room > 0:  # every sampled part was timed: what the timers leave is unnamed
        out.append(BudgetLine("other", room, room))
    for part, share in timed.items():
        sampled = [line for line in lines if line.part in groups.get(part, (part,))]
        at = next((line.at for line in sampled if line.at), None)
        margin = max((line.margin for line in sampled), default=0.0)
        if part == "input":
            cpu = sum(line.share * (line.on_cpu or 0.0) for line in sampled)
            whole = sum(line.share for line in sampled)
            cpu_part = cpu / whole if whole else 0.0
            for sub, piece in (("input_cpu", cpu_part), ("input_wait", 1.0 - cpu_part)):
                if share * piece > 0:
                    out.append(BudgetLine(sub, share * piece, margin, at, None, timed=True))
        elif share > 0:
            out.append(BudgetLine(part, share, margin, at, None, timed=True))
    return sorted(out, key=lambda line: -line.share)


def sample_part(sample: sc.ThreadSample, loop: sc.Frame | None, flow: LoopFlow | None,
                fetches: Callable[[sc.ThreadSample], bool], framework: Callable[[list[sc.Frame]], str | None],
                is_update: Callable[[str, str, int], bool], outer: Loops | None = None,
                update_lines: set[int] | frozenset[int] = frozenset()) -> Place:
    """The part of the step one classified sample of the training thread is in. `fetches` says
    whether the sample is the loop's call for its next batch (step_cycle.input_call)."""
    if sc.compile_state(sample.stack) == "compiling":
        return Place("compile")
    category = sample.category
    if category in (sc.DATA_WAIT, sc.PRODUCE, sc.STARTUP):
        return Place("input")
    if category in (sc.IO, sc.SLEEP, sc.LOCK_WAIT, sc.OTHER) and fetches(sample):
        return Place("input", None)
    if category == sc.IO:
        return Place("io")
    if category == sc.SLEEP:
        return Place("sleep", _innermost_user(sample))
    if category == sc.LOCK_WAIT:
        return Place("lock_wait", _innermost_user(sample))
    if category in _BY_CATEGORY:
        return Place(_BY_CATEGORY[category])
    found = framework(sample.stack)
    if found:
        return Place("bookkeeping", found)
    return own_code_place(sample, loop, flow, is_update, outer, update_lines)


def sample_budget(all_main: list[sc.ThreadSample], active_main: list[sc.ThreadSample],
                  place: Callable[[sc.ThreadSample], Place]) -> list[BudgetLine]:
    """The budget of the training thread's samples (`all_main`, idle included), the on-CPU sampler's
    (`active_main`) telling making input from waiting for it."""
    parts: dict[str, collections.Counter[Where]] = collections.defaultdict(collections.Counter)
    total = 0
    for s in all_main:
        where = place(s)
        parts[where.part][(where.group, where.at)] += s.count
        total += s.count
    on_cpu: collections.Counter[str] = collections.Counter()
    for s in active_main:
        on_cpu[place(s).part] += s.count
    inputs = parts.pop("input", collections.Counter())
    if inputs:
        made = min(on_cpu.get("input", 0), sum(inputs.values()))
        waited = sum(inputs.values()) - made
        if made:
            parts["input_cpu"][(None, None)] += made
            on_cpu["input_cpu"] = made
        if waited:
            parts["input_wait"][(None, None)] += waited
            on_cpu["input_wait"] = 0
    cpu_counts = {part: min(on_cpu.get(part, 0), sum(frames.values())) for part, frames in parts.items()}
    return budget(dict(parts), cpu_counts, total)


def flow_of(samples: list[sc.ThreadSample], loop: sc.Frame | None,
            source: Callable[[str], str | None]) -> LoopFlow | None:
    """The loop function's flow (which of its lines feed the step), from its source file."""
    from fieldguide.probes.loop_dataflow import loop_flow

    if loop is None:
        return None
    sinks = sink_lines(samples, loop)
    text = source(loop[1]) if sinks else None
    # A function that runs the backward or the update itself hands nothing back to a framework.
    runs_step = bool(sinks & sink_lines(samples, loop, (sc.BACKWARD, sc.OPTIMIZER)))
    return loop_flow(text, loop[0], min(sinks), sinks, returns_feed=not runs_step) if text is not None else None


def outer_loops(samples: list[sc.ThreadSample], loop: sc.Frame | None,
                source: Callable[[str], str | None]) -> Loops:
    """The job's function that calls the loop in its step samples (a `train_step(model, x, y)`
    called from the real loop), with its flow: the step is its call of the loop."""
    if loop is None:
        return []
    callers: collections.Counter[sc.Frame] = collections.Counter()
    for s in samples:
        i = loop_index(s, loop) if s.category in (sc.FORWARD, sc.BACKWARD, sc.OPTIMIZER) else None
        if i is not None and i > 0 and not is_library(s.stack[i - 1]):
            callers[s.stack[i - 1]] += s.count
    if not callers:
        return []
    caller = callers.most_common(1)[0][0]
    return [(caller, flow_of(samples, caller, source))]


def line_from_json(row: dict[str, Any]) -> BudgetLine:
    return BudgetLine(part=str(row["part"]), share=float(row["share"]), margin=float(row.get("margin") or 0.0),
                      at=row.get("at"), on_cpu=row.get("on_cpu"), timed=bool(row.get("timed")))


def walk_budget(windows: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The budget a walk's windows give (`windows`: (probe id, Measurement)): the stack window with
    the most samples, and, launched, the agent's timed shares in place of their estimates (the wait in
    DataLoader.__next__, the time in torch.save)."""
    sampled = [m for probe, m in windows if m.ok and isinstance(m.evidence.get("budget"), list)
               and m.evidence["budget"]]
    if not sampled:
        return []
    window = max(sampled, key=lambda m: m.values.get("samples") or 0)
    lines = [line_from_json(row) for row in window.evidence["budget"]]
    timed: dict[str, float] = {}
    loop = next((m for probe, m in windows if probe == "loop.steps" and m.ok), None)
    if loop is not None:
        wait = loop.values.get("data_wait_fraction")
        if loop.values.get("input_from") == "DataLoader.__next__" and isinstance(wait, (int, float)):
            timed["input"] = float(wait)
        io, saved = loop.values.get("io_fraction"), loop.values.get("save_fraction")
        if isinstance(io, (int, float)) and isinstance(saved, (int, float)) and saved > 0:
            timed["io"] = float(io)
    if sum(timed.values()) > 1.0:
        timed = {}  # two timers over different spans: the samples' own shares stand
    return [line.to_json() for line in refine(lines, timed)]
