"""torch state: the debugging switches and versions, read where the job trains.

A `state` request is answered on the training thread at a step boundary; a loop
with no step for STALL_SECONDS is answered from the agent thread instead (and
says so). A snapshot is also streamed once at the first step and again as the
job exits, so a job that dies early still leaves its switches on record.

A switch can be on for part of a step only: `with torch.autograd.detect_anomaly():`
around forward and backward reads off at the optimizer step, where a step ends.
So each backward (`torch.autograd.backward`, which `Tensor.backward` calls; not
`torch.autograd.grad`, which compiled code may trace into) also reads anomaly mode
and the profiler as it begins: the state the engine runs that backward with. The answer waits for a step boundary
with a backward since the request, and carries the counts over those backwards
(the window), beside the switches at the boundary. The agent's own op profile
is not counted as the job's profiler. (What an op profile saw of anomaly mode's
NaN checks is read by fieldguide from the profile's trace: probes/torchstate.py.)
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


# Indexes into TorchState.seen: counted by the backward wrapper, on the training thread.
BACKWARDS, ANOMALY, PROFILER = 0, 1, 2


def backward_window(before: list[int], now: list[int]) -> dict[str, int]:
    """The backwards between two readings of the counters, and how many ran with each switch on."""
    return {"backwards": now[BACKWARDS] - before[BACKWARDS], "anomaly": now[ANOMALY] - before[ANOMALY],
            "profiler": now[PROFILER] - before[PROFILER]}


class TorchState(Capability):
    name = "torchstate"
    requests = ("state",)
    streams = ("snapshots",)

    def start(self) -> None:
        # (request id, the counters when it came, when); answered once a backward has run since.
        self.pending: collections.deque[tuple[Any, list[int], float]] = collections.deque()
        self.snapshots = self.agent.stream(self.name, "snapshots")
        self.snapshot_first_step = True
        self.seen = [0, 0, 0]  # backwards, with anomaly mode on, with the job's profiler on
        self.backward_hooked = False

    def hook_torch(self, torch: ModuleType) -> None:
        self.agent.add_step_listener(self)  # for the first step's snapshot
        try:
            self.hook_backward(torch)
            self.backward_hooked = True
        except Exception as err:
            self.agent.hook_failed(self.name, "debug switches at backward", err)

    def hook_backward(self, torch: ModuleType) -> None:
        """Wrap torch.autograd.backward: count each backward, and the switches it runs with.

        Two C calls and two additions a backward (benchmarks/torchstate_backward.py measures it)."""
        is_anomaly = torch.is_anomaly_enabled
        profiling = torch._C._autograd._profiler_enabled
        seen = self.seen
        own = self.own_profiler

        base = torch.autograd.backward

        def backward(*args: Any, **kwargs: Any) -> Any:
            seen[BACKWARDS] += 1
            if is_anomaly():
                seen[ANOMALY] += 1
            if profiling() and not own():
                seen[PROFILER] += 1
            return base(*args, **kwargs)

        backward.__wrapped__ = base  # type: ignore[attr-defined]
        backward.__doc__ = base.__doc__
        torch.autograd.backward = backward

    def own_profiler(self) -> bool:
        """The agent's op profile is running (its profiler is not the job's)."""
        return getattr(self.agent.capabilities.get("opprofile"), "profiler", None) is not None

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
        """Reply to the requests whose window holds a backward; on the agent thread, or past
        STALL_SECONDS since a request came, to every one."""
        now, t = list(self.seen), time.monotonic()
        ready, waiting = [], []
        while self.pending:
            request_id, before, asked = self.pending.popleft()
            window = backward_window(before, now)
            # Steps with no backward through autograd's entry points: answered after a while anyway.
            if (window["backwards"] or sampled_on != "training" or not self.backward_hooked
                    or t - asked > STALL_SECONDS):
                ready.append((request_id, window))
            else:
                waiting.append((request_id, before, asked))
        self.pending.extend(waiting)
        if not ready:
            return
        state = self.sample(sampled_on)
        if state.get("autograd_profiler") and self.own_profiler():
            state["autograd_profiler"] = False  # the agent's own op profile, not the job's
            state["own_profiler"] = True
        state["backward_hooked"] = self.backward_hooked
        state["backwards_total"] = now[BACKWARDS]
        for request_id, window in ready:
            self.agent.reply(request_id, {"state": {**state, "during_backward": window}})

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        self.pending.append((request_id, list(self.seen), time.monotonic()))
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
            # The whole run is its window: a job that ended leaves every backward it ran.
            self.snapshots.append({**self.sample("exit"), "backward_hooked": self.backward_hooked,
                                   "during_backward": backward_window([0, 0, 0], self.seen)})


CAPABILITY = TorchState
