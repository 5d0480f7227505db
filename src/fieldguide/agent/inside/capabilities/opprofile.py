"""An op profile of a few steps with torch.profiler, started and stopped at step boundaries.

The profiler costs ~2x while active, so a request asks for a few steps only, and
a request nobody waits for any more (past its `timeout_s`) is dropped. Never
started over the job's own profiler.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from types import ModuleType
from typing import Any

from ..capability import Capability, expire_request
from .torchstate import profiler_enabled

LONG_OP_US = 100.0  # an op this long runs on several intra-op threads (ATen's grain is ~32k elements)
PARALLEL_OPS = re.compile(r"mm|matmul|linear|conv|einsum|attention")  # BLAS and oneDNN: threaded by torch


class OpProfile(Capability):
    name = "opprofile"
    requests = ("profile",)

    def start(self) -> None:
        self.lock = threading.Lock()  # the request is swapped on two threads
        self.request: dict[str, Any] | None = None
        self.profiler: Any = None
        self.steps_left = 0
        self.t0 = 0.0
        self.waited_at_start = 0.0
        self.phases_at_start: float | None = None
        self.anomaly_seen: dict[str, Any] | None = None  # the last profile's NaN checks (torchstate reads it)

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        with self.lock:
            busy = self.request is not None or self.profiler is not None
            if not busy:
                self.request = {"id": request_id, "steps": int(params.get("steps", 5)),
                                "deadline": time.monotonic() + float(params.get("timeout_s", 30)),
                                # where to write the window as a Chrome/Perfetto trace (fieldguide's folder)
                                "trace": params.get("trace") if isinstance(params.get("trace"), str) else None}
        if busy:
            self.agent.fail(request_id, "a profile is already running")
        else:
            self.agent.add_step_listener(self)

    def tick(self) -> None:
        expire_request(self, "profile", lambda: self.profiler is not None)

    def on_step(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        if self.profiler is None:
            with self.lock:
                request, self.request = self.request, None
            if request is None:
                self.agent.remove_step_listener(self)
                return
            self.begin(torch, request)
            return
        self.steps_left -= 1
        if self.steps_left <= 0:
            self.end()
        else:
            try:
                self.profiler.step()  # closes ProfilerStep#N, opens the next: the trace's step markers
            except Exception:
                pass

    def begin(self, torch: ModuleType, request: dict[str, Any]) -> None:
        if profiler_enabled(torch):  # the job's own profiler is running: never fight it
            self.agent.fail(request["id"], "a torch profiler is already active in the job")
            self.agent.remove_step_listener(self)
            return
        try:
            from torch.profiler import ProfilerAction, ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                activities.append(ProfilerActivity.CUDA)
            # A schedule that records every step makes the profiler mark each one (ProfilerStep#N),
            # which HTA's and TensorBoard's per-step views need; the window is still ours.
            profiler = profile(activities=activities, schedule=lambda step: ProfilerAction.RECORD)
            profiler.__enter__()  # type: ignore[no-untyped-call]
            distributed = getattr(torch, "distributed", None)
            if not (distributed is not None and distributed.is_available() and distributed.is_initialized()):
                # torch names the rank of a multi-rank job itself; one process is rank 0 of 1 (HTA asks)
                profiler.add_metadata_json("distributedInfo", '{"backend": "none", "rank": 0, "world_size": 1}')
        except Exception as err:
            self.agent.fail(request["id"], f"torch.profiler failed: {err!r}")
            self.agent.remove_step_listener(self)
            return
        self.profiler, self.profiled, self.steps_left, self.t0 = profiler, request, request["steps"], time.monotonic()
        self.waited_at_start = self.ranks_waited()
        self.phases_at_start = self.phases_spent()

    def end(self) -> None:
        profiler, self.profiler = self.profiler, None
        self.agent.remove_step_listener(self)
        wall = time.monotonic() - self.t0
        waited = max(self.ranks_waited() - self.waited_at_start, 0.0)
        phases = self.phases_spent()
        phased = max(phases - self.phases_at_start, 0.0) if phases is not None and self.phases_at_start is not None \
            else None
        request = self.profiled
        try:
            profiler.__exit__(None, None, None)
        except Exception as err:
            self.agent.fail(request["id"], f"torch.profiler failed: {err!r}")
            return
        # Reading the events is slow: do it off the training thread.
        threading.Thread(target=self.send_profile, args=(profiler, request, wall, waited, phased),
                         name="fieldguide-profile", daemon=True).start()

    def phases_spent(self) -> float | None:
        """Seconds the training thread has spent between a step's end and the next forward so far
        (the loop capability's running total: input, and whatever the loop does beside the step);
        None when no forward hook has ended a phase."""
        loop = self.agent.capabilities.get("loop")
        if loop is None or not getattr(loop, "phases_seen", 0):
            return None
        return float(getattr(loop, "phases_total_s", 0.0) or 0.0)

    def ranks_waited(self) -> float:
        """Seconds the training thread has waited for the other ranks of a multi-rank job so far
        (the collectives capability's running total; 0 for one process)."""
        collectives = self.agent.capabilities.get("collectives")
        return float(getattr(collectives, "waited_total_s", 0.0) or 0.0)

    def send_profile(self, profiler: Any, request: dict[str, Any], wall: float, waited: float = 0.0,
                     phased: float | None = None) -> None:
        try:
            profile = summarize_profile(profiler, request["steps"], wall, waited, phased)
        except Exception as err:
            self.agent.fail(request["id"], f"could not read the profile: {err!r}")
            return
        self.anomaly_seen = anomaly_seen(profile)
        if request.get("trace"):
            try:
                profiler.export_chrome_trace(request["trace"])
                profile["trace"] = request["trace"]
            except Exception as err:  # the counts stand without the file
                profile["trace_error"] = repr(err)
        self.agent.reply(request["id"], {"profile": profile})


COMPILED_REGION = "Torch-Compiled Region:"
# Anomaly mode checks every gradient a backward node makes for NaNs: `isnan`, then `_is_any_true`,
# run by the engine inside the node's own event. The job's own NaN checks run outside backward.
BACKWARD_NODE = "autograd::engine::evaluate_function"
ANOMALY_CHECK, ANOMALY_ANY = "aten::isnan", "aten::_is_any_true"


def anomaly_seen(profile: dict[str, Any]) -> dict[str, Any] | None:
    """What a profile saw of anomaly mode, kept for torchstate's answer; None: no NaN checks."""
    if not profile.get("anomaly_checks_per_step"):
        return None
    seen = {key: profile.get(key) for key in ("anomaly_checks_per_step", "anomaly_check_fraction", "steps")}
    seen["t"] = time.monotonic()
    return seen


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


def summarize_profile(profiler: Any, steps: int, wall: float, ranks_waited: float = 0.0,
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
    loader_us = 0.0
    device_us = 0.0
    anomaly_checks, anomaly_us = 0, 0.0
    for event in profiler.events():
        name = event.name
        if name.startswith(COMPILED_REGION):
            compile_id = name[len(COMPILED_REGION):].strip()
            regions[compile_id] = regions.get(compile_id, 0) + 1
            continue
        if name.startswith("enumerate(DataLoader)"):
            loader_us += event.cpu_time_total
            continue
        if getattr(event, "device_type", None) is not None and str(event.device_type).endswith("CUDA"):
            spent = getattr(event, "device_time_total", 0.0) or 0.0
            device_us += spent
            device.add(name, spent)
            continue
        if not name.startswith("aten::"):
            continue
        parent = event.cpu_parent
        nested = in_backward = False
        while parent is not None:
            # Inside another op, or inside the DataLoader (collate, a num_workers=0 dataset):
            # loader time is taken out of the wall time, so its ops must not count either.
            if parent.name.startswith(("aten::", "enumerate(DataLoader)")):
                nested = True
                break
            in_backward = in_backward or parent.name.startswith(BACKWARD_NODE)
            parent = parent.cpu_parent
        if not nested:
            outer.append((name, event.cpu_time_total))
            if in_backward and name == ANOMALY_CHECK:
                anomaly_checks += 1
                anomaly_us += event.cpu_time_total
                continue
            if in_backward and name == ANOMALY_ANY:
                anomaly_us += event.cpu_time_total
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


CAPABILITY = OpProfile
