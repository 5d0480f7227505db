"""Debug switches read by their effect: anomaly mode scoped to forward and backward (off again at
the optimizer step) is seen as each backward begins, and by the NaN checks it adds to backward in
an op profile. Constructed torch stand-ins and profiler events; no torch needed."""

from __future__ import annotations

import types
from typing import Any

import pytest

from fieldguide.agent.inside.capabilities.torchstate import TorchState
from fieldguide.analysis.optrace import TraceEvent, TraceEvents, anomaly_seen, summarize_events
from fieldguide.probes.torchstate import OP_PROFILE_FRESH_S, debug_values


# -- the agent side: counting backwards and the switches they run with ---------------------------
class FakeAgent:
    def __init__(self) -> None:
        self.replies: list[tuple[Any, dict[str, Any]]] = []
        self.listeners: set[Any] = set()
        self.capabilities: dict[str, Any] = {}
        self.step_count = 0
        self.last_step_seen = 0.0
        self.failed: list[str] = []

    def stream(self, capability: str, name: str, **_: Any) -> list[Any]:
        return []

    def add_step_listener(self, capability: Any) -> None:
        self.listeners.add(capability)

    def remove_step_listener(self, capability: Any) -> None:
        self.listeners.discard(capability)

    def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self.replies.append((request_id, result))

    def hook_failed(self, capability: str, hook: str, err: BaseException) -> None:
        self.failed.append(hook)


class FakeTorch:
    """What the backward hook touches: the switches, and autograd's entry points."""

    def __init__(self) -> None:
        self.anomaly = False
        self.profiling = False
        self.calls: list[str] = []
        self._C = types.SimpleNamespace(_autograd=types.SimpleNamespace(_profiler_enabled=lambda: self.profiling))

        def backward(*args: Any, **kwargs: Any) -> str:
            self.calls.append("backward")
            return "backward-result"

        def grad(*args: Any, **kwargs: Any) -> str:
            self.calls.append("grad")
            return "grad-result"

        self.autograd = types.SimpleNamespace(backward=backward, grad=grad)

    def is_anomaly_enabled(self) -> bool:
        return self.anomaly


def hooked() -> tuple[TorchState, FakeAgent, FakeTorch]:
    agent, torch = FakeAgent(), FakeTorch()
    state = TorchState(agent)  # type: ignore[arg-type]
    state.start()
    state.hook_torch(torch)  # type: ignore[arg-type]
    assert state.backward_hooked and not agent.failed
    return state, agent, torch


def test_anomaly_inside_a_with_is_counted_as_the_backward_begins() -> None:
    state, agent, torch = hooked()
    state.on_request("state", 1, {})
    for _ in range(3):  # the job's step: `with detect_anomaly(): forward; backward`, then the update
        torch.anomaly = True
        assert torch.autograd.backward("loss") == "backward-result"
        torch.anomaly = False
    state.on_step()  # the boundary reads the switch off; the window says otherwise
    (request_id, result), = agent.replies
    assert request_id == 1
    assert result["state"]["during_backward"] == {"backwards": 3, "anomaly": 3, "profiler": 0}
    assert torch.calls == ["backward"] * 3
    assert torch.autograd.grad("y", "x") == "grad-result"  # not wrapped: compiled code may trace into it
    assert state.seen[0] == 3 and torch.autograd.backward.__wrapped__ is not None


def test_a_request_waits_for_a_backward_of_its_own() -> None:
    state, agent, torch = hooked()
    torch.anomaly = True
    torch.autograd.backward("loss")  # before the request: not its window
    torch.anomaly = False
    state.on_request("state", 2, {})
    state.on_step()
    assert agent.replies == [] and state in agent.listeners
    torch.autograd.backward("loss")
    state.on_step()
    assert agent.replies[0][1]["state"]["during_backward"] == {"backwards": 1, "anomaly": 0, "profiler": 0}
    assert state not in agent.listeners


def test_the_agents_own_profile_is_not_the_jobs_profiler() -> None:
    state, agent, torch = hooked()
    own = types.SimpleNamespace(profiler=object(), anomaly_seen=None)
    agent.capabilities["opprofile"] = own
    state.on_request("state", 3, {})
    torch.profiling = True
    torch.autograd.backward("loss")  # inside the agent's op profile
    own.profiler = None
    torch.autograd.backward("loss")  # the job's own profiler
    state.on_step()
    assert agent.replies[0][1]["state"]["during_backward"]["profiler"] == 1


# -- the op profile: anomaly mode's NaN checks inside backward ----------------------------------
def event(name: str, us: float, parent: Any = None) -> TraceEvent:
    return TraceEvent(name, 0.0, us, parent)


def profiler_of(*events: TraceEvent) -> TraceEvents:
    return TraceEvents(host=list(events))


def test_nan_checks_inside_backward_nodes_are_counted_and_the_jobs_own_are_not() -> None:
    node = event("autograd::engine::evaluate_function: AddmmBackward0", 50.0)
    checks = []
    for _ in range(4):
        isnan = event("aten::isnan", 3.0, node)
        any_true = event("aten::_is_any_true", 2.0, node)
        checks += [isnan, any_true, event("aten::any", 1.5, any_true)]  # any: inside _is_any_true
    own_check = event("aten::isnan", 3.0)  # the job's `torch.isnan(loss)`, outside backward
    profile = summarize_events(profiler_of(node, event("aten::mm", 30.0, node), *checks, own_check), 2, 0.001)
    assert profile["anomaly_checks_per_step"] == 2.0  # 4 checks over 2 steps
    assert profile["anomaly_check_fraction"] == pytest.approx(20.0 / 1000.0)
    assert anomaly_seen(profile)["anomaly_checks_per_step"] == 2.0  # type: ignore[index]
    clean = summarize_events(profiler_of(node, event("aten::mm", 30.0, node), own_check), 2, 0.001)
    assert clean["anomaly_checks_per_step"] == 0 and anomaly_seen(clean) is None


# -- the probe: on, however it was seen ---------------------------------------------------------
def test_the_flag_reads_on_when_backwards_ran_with_it_though_the_boundary_read_off() -> None:
    state = {"anomaly_detection": False, "autograd_profiler": False,
             "during_backward": {"backwards": 5, "anomaly": 5, "profiler": 0}}
    values = debug_values(state)
    assert values["anomaly_detection"] is True and values["debug_switches"] == "anomaly_detection"
    assert values["anomaly_seen"] == "on in 5 of 5 backwards as each began"
    assert values["backwards_read"] == 5 and values["autograd_profiler"] is False


def test_off_everywhere_reads_off_and_a_profiler_seen_in_backward_reads_on() -> None:
    off = debug_values({"anomaly_detection": False, "autograd_profiler": False,
                        "during_backward": {"backwards": 4, "anomaly": 0, "profiler": 0}})
    assert off["anomaly_detection"] is False and off["anomaly_seen"] == "off" and off["debug_switches_on"] == 0
    profiled = debug_values({"anomaly_detection": False, "autograd_profiler": False,
                             "during_backward": {"backwards": 4, "anomaly": 0, "profiler": 4}})
    assert profiled["autograd_profiler"] is True and profiled["profiler_seen"] == "in 4 of 4 backwards"


def test_nan_checks_in_a_recent_op_profile_read_on_and_a_stale_one_does_not() -> None:
    checks = {"anomaly_checks_per_step": 284.0, "anomaly_check_fraction": 0.12, "steps": 5}
    base = {"anomaly_detection": False, "during_backward": {"backwards": 2, "anomaly": 0, "profiler": 0}}
    recent = debug_values({**base, "op_profile": {**checks, "age_s": 4.0}})
    assert recent["anomaly_detection"] is True and "284 NaN checks" in recent["anomaly_seen"]
    stale = debug_values({**base, "op_profile": {**checks, "age_s": OP_PROFILE_FRESH_S + 1}})
    assert stale["anomaly_detection"] is False


def test_an_unreadable_switch_stays_unknown() -> None:
    assert debug_values({"anomaly_detection": None})["anomaly_detection"] is None
