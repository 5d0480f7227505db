"""torch state: the debugging switches and versions, read where the job trains.

Anomaly mode is thread-local, so a `state` request is answered on the training
thread at the next step boundary; a loop with no step for STALL_SECONDS is
answered from the agent thread instead (and says so). A snapshot is also
streamed once at the first step and again as the job exits, so a job that dies
early still leaves its switches on record.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from types import ModuleType
from typing import Any

from ..capability import Capability

# Not a judgement: how long a request waits for a step before the agent thread answers it.
STALL_SECONDS = 3.0


def profiler_enabled(torch: ModuleType) -> bool:
    try:
        on = bool(torch._C._autograd._profiler_enabled())
    except Exception:
        on = False
    # The legacy profiler's Python-side flag is global, not per thread.
    return on or bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def torch_state(torch: ModuleType) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": getattr(torch, "__version__", None),
                             "cuda": getattr(torch.version, "cuda", None)}
    for key, read in (("anomaly_detection", torch.is_anomaly_enabled),
                      ("deterministic_algorithms", torch.are_deterministic_algorithms_enabled),
                      ("num_threads", torch.get_num_threads)):
        try:
            state[key] = read()
        except Exception:
            state[key] = None
    state["autograd_profiler"] = profiler_enabled(torch)
    state["sync_debug_mode"] = None
    state["cuda_initialized"] = False
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda_initialized"] = True
            state["sync_debug_mode"] = int(torch.cuda.get_sync_debug_mode())
            state["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    except Exception:
        pass
    return state


class TorchState(Capability):
    name = "torchstate"
    requests = ("state",)
    streams = ("snapshots",)

    def start(self) -> None:
        self.pending: collections.deque[Any] = collections.deque()
        self.snapshots = self.agent.stream(self.name, "snapshots")
        self.snapshot_first_step = True

    def hook_torch(self, torch: ModuleType) -> None:
        self.agent.add_step_listener(self)  # for the first step's snapshot

    def sample(self, sampled_on: str) -> dict[str, Any]:
        state: dict[str, Any] = {
            "sampled_on": sampled_on, "step_count": self.agent.step_count, "t": time.monotonic(),
            "cuda_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"),
            "python": sys.version.split()[0], "torch_imported": "torch" in sys.modules}
        torch = sys.modules.get("torch")
        try:
            if torch is not None:
                state.update(torch_state(torch))
        except Exception as err:
            state["error"] = repr(err)
        return state

    def answer(self, sampled_on: str) -> None:
        ids = []
        while self.pending:
            ids.append(self.pending.popleft())
        if not ids:
            return
        state = self.sample(sampled_on)
        for request_id in ids:
            self.agent.reply(request_id, {"state": state})

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        self.pending.append(request_id)
        self.agent.add_step_listener(self)

    def on_step(self) -> None:
        if self.snapshot_first_step:
            self.snapshot_first_step = False
            self.snapshots.append(self.sample("training"))
        self.answer("training")
        if not self.pending:
            self.agent.remove_step_listener(self)

    def tick(self) -> None:
        if self.pending and time.monotonic() - self.agent.last_step_seen > STALL_SECONDS:
            self.answer("agent")

    def on_exit(self) -> None:
        if "torch" in sys.modules:
            self.snapshots.append(self.sample("exit"))


CAPABILITY = TorchState
