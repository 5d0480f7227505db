"""CUDA from the inside: host syncs and where they happen, and device time per step.

`syncs`: for a few steps, torch's sync debug mode "warn" makes every synchronizing CUDA call
(`.item()`, `.cpu()`, `nonzero`, printing a tensor) issue a warning; each is counted with the
job's own frame that made it, and not shown. The job's mode and warning filters are put back.
`device_time`: CUDA events recorded at step boundaries give the device's time per step beside
the host's interval (an unsynchronized host loop runs ahead of the device); the last event is
waited for on a thread of ours, never the training thread.
`peak`: the caching allocator's peaks since the job started (max allocated and reserved), read at
the next step boundary on the training thread, whose current device is the job's (an agent
thread's is device 0). Nothing is reset: the job's own peak statistics stay as they were.
A job that has not initialised CUDA gets a failed reply saying so: nothing is initialised for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import warnings
from types import ModuleType
from typing import Any

from ..capability import Capability

SYNC_MARK = "synchroniz"  # "called a synchronizing CUDA operation"
MAX_SITES = 10


def cuda_in_use(torch: ModuleType | None) -> bool:
    try:
        return torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
    except Exception:
        return False


def user_site(stack: list[traceback.FrameSummary]) -> str:
    """The innermost frame outside torch, the standard library and fieldguide: the job's line."""
    for frame in reversed(stack):
        path = frame.filename
        if "/torch/" in path or "/_fieldguide_agent" in path or "fieldguide/agent" in path \
                or "/lib/python3" in path and "site-packages" not in path or path.startswith("<"):
            continue
        return f"{os.path.basename(path)}:{frame.lineno} in {frame.name}"
    return "torch internals"


class CudaWatch(Capability):
    name = "cuda"
    requests = ("syncs", "device_time", "peak")

    def start(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, dict[str, Any]] = {}
        self.sync_run: dict[str, Any] | None = None
        self.timing: dict[str, Any] | None = None

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        torch = self.agent.torch
        if not cuda_in_use(torch):
            self.agent.fail(request_id, "the job has not initialised CUDA (no work on a GPU to measure)")
            return
        with self.lock:
            if name in self.pending or (name == "syncs" and self.sync_run) or (name == "device_time" and self.timing):
                self.agent.fail(request_id, f"a {name} measurement is already running")
                return
            self.pending[name] = {"id": request_id, "steps": max(int(params.get("steps", 5)), 1),
                                  "deadline": time.monotonic() + float(params.get("timeout_s", 30))}
        self.agent.add_step_listener(self)

    def tick(self) -> None:
        now = time.monotonic()
        with self.lock:
            late = [(name, req) for name, req in self.pending.items() if now > req["deadline"]]
            for name, _ in late:
                del self.pending[name]
        for _, req in late:
            self.agent.fail(req["id"], "no training step came to measure")

    # -- on the training thread, at step boundaries ---------------------------------------------------
    def on_step(self) -> None:
        torch = self.agent.torch
        with self.lock:
            start_syncs = self.pending.pop("syncs", None)
            start_timing = self.pending.pop("device_time", None)
            peak = self.pending.pop("peak", None)
        if peak is not None:
            self.send_peak(torch, peak)
        if self.sync_run is not None:
            self.sync_run["steps_done"] += 1
            if self.sync_run["steps_done"] >= self.sync_run["steps"]:
                self.end_syncs(torch)
        if start_syncs is not None:
            self.begin_syncs(torch, start_syncs)
        if self.timing is not None:
            self.record_event(torch)
        if start_timing is not None:
            self.timing = {**start_timing, "events": [], "host": []}
            self.record_event(torch)
        if self.sync_run is None and self.timing is None and not self.pending:
            self.agent.remove_step_listener(self)

    def begin_syncs(self, torch: Any, request: dict[str, Any]) -> None:
        run: dict[str, Any] = {**request, "steps_done": 0, "sites": {}, "count": 0,
                               "mode": torch.cuda.get_sync_debug_mode(), "filters": list(warnings.filters),
                               "showwarning": warnings.showwarning, "t0": time.monotonic()}
        original = warnings.showwarning

        def showwarning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                        line: Any = None) -> None:
            try:
                if SYNC_MARK in str(message):
                    site = user_site(traceback.extract_stack()[:-1])
                    run["sites"][site] = run["sites"].get(site, 0) + 1
                    run["count"] += 1
                    return  # counted, not shown
            except Exception:
                pass  # inside the job's own warnings.warn: never raise there
            original(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=f".*{SYNC_MARK}.*")  # every one, not once per line
        warnings.showwarning = showwarning
        torch.cuda.set_sync_debug_mode("warn")
        self.sync_run = run

    def end_syncs(self, torch: Any) -> None:
        run, self.sync_run = self.sync_run, None
        if run is None:
            return
        try:
            torch.cuda.set_sync_debug_mode(run["mode"])
        finally:
            warnings.showwarning = run["showwarning"]
            warnings.filters[:] = run["filters"]  # type: ignore[index]
        sites = sorted(run["sites"].items(), key=lambda kv: -kv[1])[:MAX_SITES]
        self.agent.reply(run["id"], {"steps": run["steps"], "syncs": run["count"],
                                     "per_step": run["count"] / run["steps"],
                                     "seconds": time.monotonic() - run["t0"],
                                     "sites": [{"where": w, "count": c, "per_step": c / run["steps"]}
                                               for w, c in sites]})

    def send_peak(self, torch: Any, request: dict[str, Any]) -> None:
        try:
            self.agent.reply(request["id"], {"device": int(torch.cuda.current_device()),
                                             "max_allocated": int(torch.cuda.max_memory_allocated()),
                                             "max_reserved": int(torch.cuda.max_memory_reserved())})
        except Exception as err:
            self.agent.fail(request["id"], f"reading the CUDA allocator's peaks failed: {type(err).__name__}: {err}")

    def record_event(self, torch: Any) -> None:
        timing = self.timing
        assert timing is not None
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        timing["events"].append(event)
        timing["host"].append(time.monotonic())
        if len(timing["events"]) == 1:
            # How deep the queue already is as the window opens: in steady state the host runs a
            # full queue ahead, and a window's end then holds as much as its start did.
            timing["first_waiter"] = threading.Thread(target=self.wait_first, args=(timing,), name="fieldguide-cuda", daemon=True)
            timing["first_waiter"].start()
        if len(timing["events"]) > timing["steps"]:
            self.timing = None
            threading.Thread(target=self.send_timing, args=(timing,), name="fieldguide-cuda", daemon=True).start()

    @staticmethod
    def wait_first(timing: dict[str, Any]) -> None:
        try:
            timing["events"][0].synchronize()  # on our thread, like the last one
            timing["first_drained"] = time.monotonic()
        except Exception:
            pass  # the window's start depth stays unknown; the end is still measured

    def send_timing(self, timing: dict[str, Any]) -> None:
        try:
            events, host = timing["events"], timing["host"]
            last_recorded = host[-1]
            events[-1].synchronize()  # on our thread: the training thread never waits for this
            drained = time.monotonic()
            timing["first_waiter"].join(1.0)  # done with the last event's wait, bar being scheduled
            first = timing.get("first_drained")
            start = {"queued_ms_at_start": max(first - host[0], 0.0) * 1000} if first is not None else {}
            device_ms = [a.elapsed_time(b) for a, b in zip(events, events[1:], strict=False)]
            host_ms = [(b - a) * 1000 for a, b in zip(host, host[1:], strict=False)]
            self.agent.reply(timing["id"], {"steps": len(device_ms), "device_ms": device_ms, "host_ms": host_ms,
                                            "queued_ms_at_end": max(drained - last_recorded, 0.0) * 1000, **start})
        except Exception as err:
            self.agent.fail(timing["id"], f"CUDA event timing failed: {type(err).__name__}: {err}")

    def on_exit(self) -> None:
        if self.sync_run is not None and "torch" in sys.modules:
            self.end_syncs(sys.modules["torch"])


CAPABILITY = CudaWatch
