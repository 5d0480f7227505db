"""An op profile of a few steps with torch's profiler, started and stopped at step boundaries.

The profiler costs ~2x while active, so a request asks for a few steps only, and
a request nobody waits for any more (past its `timeout_s`) is dropped. Never
started over the job's own profiler. The job only records and saves kineto's
trace; fieldguide reads it (analysis/optrace.py): building torch's event list
here would hold the job's GIL for tens of milliseconds.

torch.autograd.profiler's profile, not torch.profiler's: the latter's start asks
`hasattr(torch, "_inductor")`, which imports inductor and dynamo (about a second
on the training thread) in a job that has not (no torch.optim, no compile).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from types import ModuleType
from typing import Any

from ..capability import Capability, expire_request
from .torchstate import profiler_enabled

STEP_MARKER = "ProfilerStep#"  # what torch.profiler names each step: HTA's and TensorBoard's per-step views


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
        self.marker: Any = None  # the open ProfilerStep#N range
        self.step_num = -1

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        with self.lock:
            busy = self.request is not None or self.profiler is not None
            if not busy:
                self.request = {"id": request_id, "steps": int(params.get("steps", 5)),
                                "deadline": time.monotonic() + float(params.get("timeout_s", 30))}
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
            self.mark_step(torch)

    def mark_step(self, torch: ModuleType) -> None:
        """Close the step's marker and open the next one (ProfilerStep#N, as torch.profiler marks)."""
        marker, self.marker = self.marker, None
        with contextlib.suppress(Exception):
            if marker is not None:
                marker.__exit__(None, None, None)
            self.step_num += 1
            marker = torch.autograd.profiler.record_function(f"{STEP_MARKER}{self.step_num}")
            marker.__enter__()
            self.marker = marker

    def begin(self, torch: ModuleType, request: dict[str, Any]) -> None:
        if profiler_enabled(torch):  # the job's own profiler is running: never fight it
            self.agent.fail(request["id"], "a torch profiler is already active in the job")
            self.agent.remove_step_listener(self)
            return
        try:
            device = "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else None
            profiler = torch.autograd.profiler.profile(use_cpu=True, use_device=device, use_kineto=True)
            profiler.__enter__()
            torch.autograd._add_metadata_json("distributedInfo", json.dumps(distributed_info(torch)))
        except Exception as err:
            self.agent.fail(request["id"], f"torch.profiler failed: {err!r}")
            self.agent.remove_step_listener(self)
            return
        self.profiler, self.profiled, self.steps_left, self.t0 = profiler, request, request["steps"], time.monotonic()
        self.step_num, self.marker = -1, None
        self.mark_step(torch)
        self.waited_at_start = self.ranks_waited()
        self.phases_at_start = self.phases_spent()

    def end(self) -> None:
        profiler, self.profiler = self.profiler, None
        marker, self.marker = self.marker, None
        self.agent.remove_step_listener(self)
        wall = time.monotonic() - self.t0
        waited = max(self.ranks_waited() - self.waited_at_start, 0.0)
        phases = self.phases_spent()
        phased = max(phases - self.phases_at_start, 0.0) if phases is not None and self.phases_at_start is not None \
            else None
        request = self.profiled
        try:
            if marker is not None:
                marker.__exit__(None, None, None)
            profiler.__exit__(None, None, None)
        except Exception as err:
            self.agent.fail(request["id"], f"torch.profiler failed: {err!r}")
            return
        # Saving the trace is kineto's C++, but off the training thread all the same.
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
        """The trace as text, saved to a private file of the job's and read back: fieldguide reads
        the numbers from it, and keeps its own copy where it wants one."""
        try:
            fd, path = tempfile.mkstemp(prefix="fieldguide-profile-", suffix=".json")
            os.close(fd)
            try:
                profiler.export_chrome_trace(path)
                with open(path, encoding="utf-8", errors="replace") as saved:
                    trace = saved.read()
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        except Exception as err:
            self.agent.fail(request["id"], f"could not save the profile: {err!r}")
            return
        self.agent.reply(request["id"], {"profile": {"steps": request["steps"], "wall_s": wall,
                                                     "ranks_waited_s": waited, "phased_s": phased,
                                                     "trace_json": trace}})


def distributed_info(torch: ModuleType) -> dict[str, Any]:
    """The rank, as torch.profiler writes it into a trace (HTA asks): one process is rank 0 of 1."""
    distributed = getattr(torch, "distributed", None)
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return {"backend": str(distributed.get_backend()), "rank": distributed.get_rank(),
                "world_size": distributed.get_world_size()}
    return {"backend": "none", "rank": 0, "world_size": 1}


CAPABILITY = OpProfile
