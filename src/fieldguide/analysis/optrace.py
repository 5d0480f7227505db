"""An op profile's numbers, read from the Chrome trace torch.profiler wrote inside the job.

The job only records a few steps and saves kineto's trace (C++, about a millisecond); building
torch's event list in the job would hold its GIL for tens of milliseconds (hundreds on a job of
many small ops) while it trains. So the trace comes to fieldguide, which reads it here: the
outermost aten ops (an op's own children are part of it), DataLoader time, CUDA kernels and
copies, compiled regions, anomaly mode's NaN checks inside backward.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

LONG_OP_US = 100.0  # an op this long runs on several intra-op threads (ATen's grain is ~32k elements)
PARALLEL_OPS = re.compile(r"mm|matmul|linear|conv|einsum|attention")  # BLAS and oneDNN: threaded by torch
COMPILED_REGION = "Torch-Compiled Region:"
LOADER = "enumerate(DataLoader)"
# Anomaly mode checks every gradient a backward node makes for NaNs: `isnan`, then `_is_any_true`,
# run by the engine inside the node's own event. The job's own NaN checks run outside backward.
BACKWARD_NODE = "autograd::engine::evaluate_function"
ANOMALY_CHECK, ANOMALY_ANY = "aten::isnan", "aten::_is_any_true"
HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


@dataclass
class TraceEvent:
    """One complete ("X") event of the trace, with its enclosing event on the same thread."""

    name: str
    start_us: float
    duration_us: float
    parent: TraceEvent | None = None

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


@dataclass
class TraceEvents:
    host: list[TraceEvent] = field(default_factory=list)  # cpu ops and record_function ranges
    device: list[TraceEvent] = field(default_factory=list)  # kernels, copies and memsets


def trace_events(trace: dict[str, Any]) -> TraceEvents:
    """The trace's host events nested per thread by their time spans (what torch's event list does
    with kineto's results), and its device events."""
    threads: dict[tuple[Any, Any], list[tuple[float, float, int, str]]] = {}
    events = TraceEvents()
    for index, raw in enumerate(trace.get("traceEvents") or []):
        if not isinstance(raw, dict) or raw.get("ph") != "X":
            continue
        try:
            name, start, duration = str(raw["name"]), float(raw["ts"]), float(raw.get("dur") or 0.0)
        except (KeyError, TypeError, ValueError):
            continue
        category = raw.get("cat")
        if category in DEVICE_CATEGORIES:
            events.device.append(TraceEvent(name, start, duration))
        elif category in HOST_CATEGORIES:
            threads.setdefault((raw.get("pid"), raw.get("tid")), []).append((start, -duration, index, name))
    for spans in threads.values():
        spans.sort()  # by start; the longer first where two start together (the parent)
        open_events: list[TraceEvent] = []
        for start, negative, _, name in spans:
            while open_events and open_events[-1].end_us <= start:
                open_events.pop()
            event = TraceEvent(name, start, -negative, open_events[-1] if open_events else None)
            events.host.append(event)
            open_events.append(event)
    return events


class DeviceActivity:
    """CUDA activity in a profile: kernels (how many, how long) and copies (host to device from
    pageable memory is a synchronous copy the device waits for)."""

    def __init__(self) -> None:
        self.kernels: list[float] = []
        self.h2d_pageable_us = 0.0
        self.h2d_pageable = 0
        self.h2d_pinned_us = 0.0
        self.copy_us = 0.0

    def add(self, name: str, us: float) -> None:
        if name.startswith("Memcpy"):
            self.copy_us += us
            if "HtoD" in name and "Pageable" in name:
                self.h2d_pageable += 1
                self.h2d_pageable_us += us
            elif "HtoD" in name:
                self.h2d_pinned_us += us
        elif not name.startswith("Memset"):
            self.kernels.append(us)

    def summary(self, steps: int, wall: float) -> dict[str, Any]:
        if not self.kernels and not self.copy_us:
            return {}
        per = max(steps, 1)
        kernels = sorted(self.kernels)
        wall_us = max(wall * 1e6, 1.0)
        return {"kernels_per_step": len(kernels) / per,
                "median_kernel_us": kernels[len(kernels) // 2] if kernels else None,
                "kernel_busy_fraction": min(sum(kernels) / wall_us, 1.0),
                "h2d_pageable_per_step": self.h2d_pageable / per,
                "h2d_pageable_fraction": min(self.h2d_pageable_us / wall_us, 1.0),
                "h2d_pinned_fraction": min(self.h2d_pinned_us / wall_us, 1.0),
                "copy_fraction": min(self.copy_us / wall_us, 1.0)}


def summarize_events(events: TraceEvents, steps: int, wall: float, ranks_waited: float = 0.0,
                     phased: float | None = None) -> dict[str, Any]:
    """Ops per step, median op time, and the share of step time inside ops.

    "Ops" are the outermost aten:: calls (an op's own children are part of it);
    DataLoader time is taken out of the wall time so that input waits do not
    read as framework overhead; so is `ranks_waited`, the seconds the training thread
    waited in collectives for the other ranks of a multi-rank job, and `phased`, the seconds
    from each step's end to the next forward (input, and the loop's own work beside the step,
    which the step budget names apart): what is left is the model's step, forward to update.
    """
    outer: list[tuple[str, float]] = []
    regions: dict[str, int] = {}  # compiled graphs run, by compile id ("1/0"): breaks show here
    device = DeviceActivity()
    device_us = 0.0
    for event in events.device:
        device_us += event.duration_us
        device.add(event.name, event.duration_us)
    loader_us = 0.0
    anomaly_checks, anomaly_us = 0, 0.0
    for event in events.host:
        name = event.name
        if name.startswith(COMPILED_REGION):
            compile_id = name[len(COMPILED_REGION):].strip()
            regions[compile_id] = regions.get(compile_id, 0) + 1
            continue
        if name.startswith(LOADER):
            loader_us += event.duration_us
            continue
        if not name.startswith("aten::"):
            continue
        parent = event.parent
        nested = in_backward = False
        while parent is not None:
            # Inside another op, or inside the DataLoader (collate, a num_workers=0 dataset):
            # loader time is taken out of the wall time, so its ops must not count either.
            if parent.name.startswith(("aten::", LOADER)):
                nested = True
                break
            in_backward = in_backward or parent.name.startswith(BACKWARD_NODE)
            parent = parent.parent
        if not nested:
            outer.append((name, event.duration_us))
            if in_backward and name == ANOMALY_CHECK:
                anomaly_checks += 1
                anomaly_us += event.duration_us
            elif in_backward and name == ANOMALY_ANY:
                anomaly_us += event.duration_us
    durations = sorted(d for _, d in outer)
    op_us = sum(durations)
    phase_us = (phased or 0.0) * 1e6
    # The DataLoader's wait happens inside the input phase: the larger of the two is taken out.
    compute_wall_us = max(wall * 1e6 - max(loader_us, phase_us) - ranks_waited * 1e6, 1.0)
    by_name: dict[str, tuple[float, int]] = {}
    for name, d in outer:
        total, count = by_name.get(name, (0.0, 0))
        by_name[name] = (total + d, count + 1)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:10]
    return {
        "steps": steps,
        "wall_s": wall,
        "ops": len(outer),
        "ops_per_step": len(outer) / max(steps, 1),
        "median_op_us": durations[len(durations) // 2] if durations else None,
        "op_time_fraction": min(op_us / compute_wall_us, 1.0),
        # Matmuls and convolutions long enough to be split over intra-op threads: the share of the
        # whole step (its wall time) more cores can speed up. Other long ops (a sort, a copy, an
        # embedding's backward) may run on one thread whatever the count: not counted.
        "long_op_fraction": min(sum(d for n, d in outer if d >= LONG_OP_US and PARALLEL_OPS.search(n))
                                / max(wall * 1e6, 1.0), 1.0),
        "loader_fraction": min(loader_us / max(wall * 1e6, 1.0), 1.0),
        "phase_fraction": None if phased is None else min(max(loader_us, phase_us) / max(wall * 1e6, 1.0), 1.0),
        "ranks_wait_fraction": min(ranks_waited * 1e6 / max(wall * 1e6, 1.0), 1.0),
        "device_time_us": device_us or None,
        "compiled_regions": regions,
        # NaN checks inside backward nodes: anomaly mode's own ops, and their share of the window.
        "anomaly_checks_per_step": anomaly_checks / max(steps, 1),
        "anomaly_check_fraction": min(anomaly_us / compute_wall_us, 1.0),
        **device.summary(steps, wall),
        "top_ops": [{"op": n, "total_us": round(t, 1), "count": c} for n, (t, c) in top],
    }


def anomaly_seen(profile: dict[str, Any]) -> dict[str, Any] | None:
    """What a profile saw of anomaly mode, kept for torch.flags; None: no NaN checks."""
    if not profile.get("anomaly_checks_per_step"):
        return None
    seen = {key: profile.get(key) for key in ("anomaly_checks_per_step", "anomaly_check_fraction", "steps")}
    seen["t"] = time.monotonic()
    return seen
