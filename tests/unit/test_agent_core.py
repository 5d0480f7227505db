"""The in-job agent's core on a socket pair, without torch: dispatch, replies, failures, exit."""

from __future__ import annotations

import collections
import json
import socket
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from fieldguide.agent.channel import PROTOCOL
from fieldguide.agent.inside.capabilities.opprofile import OpProfile
from fieldguide.agent.inside.core import PROTOCOL as AGENT_PROTOCOL
from fieldguide.agent.inside.core import Agent, capability_classes


class Host:
    """fieldguide's end of a socket pair: send requests, read messages."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.sock.settimeout(5)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall((json.dumps(message) + "\n").encode())

    def messages(self, until: Any, timeout: float = 5.0) -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                seen.append(json.loads(line))
                if until(seen[-1]):
                    return seen
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            self.buffer += chunk
        raise AssertionError(f"not seen within {timeout} s; got {seen}")


@pytest.fixture
def agent_and_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Agent, Host]]:
    import atexit
    import sys

    # The lifecycle capability hooks these process-wide: put them back after each test.
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(atexit, "register", lambda func, *a, **k: func)
    inside, outside = socket.socketpair()
    agent = Agent(inside)
    agent.start()
    thread = threading.Thread(target=agent.serve, daemon=True)
    thread.start()
    yield agent, Host(outside)
    agent.disabled = True
    outside.close()
    thread.join(timeout=2)
    inside.close()


def test_hello_names_the_protocol_and_every_capability(agent_and_host: tuple[Agent, Host]) -> None:
    _, host = agent_and_host
    hello = host.messages(lambda m: m["type"] == "hello")[-1]
    assert hello["protocol"] == PROTOCOL == AGENT_PROTOCOL
    assert set(hello["capabilities"]) == {c.name for c in capability_classes()}
    assert {"loop", "torchstate", "opprofile", "lifecycle"} <= set(hello["capabilities"])
    assert hello["capabilities"]["torchstate"]["requests"] == ["state"]


def test_an_unknown_capability_is_an_error_reply_with_the_request_id(agent_and_host: tuple[Agent, Host]) -> None:
    _, host = agent_and_host
    host.send({"type": "request", "id": 41, "capability": "telepathy", "name": "read", "params": {}})
    reply = host.messages(lambda m: m["type"] == "reply")[-1]
    assert reply == {"type": "reply", "id": 41, "ok": False, "error": reply["error"]}
    assert "no capability 'telepathy'" in reply["error"] and "torchstate" in reply["error"]


def test_a_handler_that_raises_is_an_error_reply_and_the_agent_goes_on(agent_and_host: tuple[Agent, Host],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    agent, host = agent_and_host

    def broken(name: str, request_id: Any, params: dict[str, Any]) -> None:
        raise RuntimeError("handler bug")

    monkeypatch.setattr(agent.capabilities["torchstate"], "on_request", broken)
    host.send({"type": "request", "id": 7, "capability": "torchstate", "name": "state"})
    reply = host.messages(lambda m: m["type"] == "reply")[-1]
    assert reply["id"] == 7 and reply["ok"] is False and "RuntimeError: handler bug" in reply["error"]
    host.send(b"not json".decode())  # malformed line: still no crash
    host.send({"type": "request", "id": 8, "capability": "opprofile", "name": "nope"})
    reply = host.messages(lambda m: m["type"] == "reply" and m["id"] == 8)[-1]
    assert reply["ok"] is False and "answers no request 'nope'" in reply["error"]


def test_the_agent_thread_survives_a_failing_tick_and_reports_it(agent_and_host: tuple[Agent, Host],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    agent, host = agent_and_host
    calls = []

    def flaky_flush() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("flush bug")
        Agent.flush(agent)

    monkeypatch.setattr(agent, "flush", flaky_flush)
    error = host.messages(lambda m: m["type"] == "agent_error")[-1]
    assert "ValueError: flush bug" in error["error"]
    host.send({"type": "request", "id": 3, "capability": "torchstate", "name": "state"})
    # No torch and no step: answered from the agent thread once the stall time passes.
    reply = host.messages(lambda m: m["type"] == "reply" and m["id"] == 3, timeout=8)[-1]
    assert reply["ok"] is True and reply["result"]["state"]["sampled_on"] == "agent"


def test_a_hook_that_fails_to_install_reports_itself(agent_and_host: tuple[Agent, Host]) -> None:
    agent, host = agent_and_host
    agent.hook_failed("loop", "DataLoader __next__/__iter__", AttributeError("no _BaseDataLoaderIter"))
    failed = host.messages(lambda m: m["type"] == "hook_failed")[-1]
    assert failed["capability"] == "loop" and "AttributeError: no _BaseDataLoaderIter" in failed["error"]


def test_a_profile_request_dropped_by_the_agent_thread_mid_step_is_no_crash() -> None:
    # The race the review found: the agent thread drops a stale request while the training
    # thread is about to start it. The swap is under a lock and read once.
    inside, outside = socket.socketpair()
    agent = Agent(inside)
    agent.start()
    profile = agent.capabilities["opprofile"]
    assert isinstance(profile, OpProfile)
    profile.on_request("profile", 1, {"steps": 2, "timeout_s": 0.0})
    time.sleep(0.01)
    profile.tick()  # past its deadline: dropped, failed with its id
    profile.on_step()  # the training thread finds nothing to start, and stops listening
    assert profile.request is None and profile.profiler is None
    assert profile not in agent.step_listeners
    failed = [m for m in agent.outbox if m.get("type") == "reply"]
    assert failed == [{"type": "reply", "id": 1, "ok": False, "error": "no training step came to profile"}]
    inside.close()
    outside.close()


def test_an_uncaught_exception_is_recorded_and_flushed(agent_and_host: tuple[Agent, Host]) -> None:
    import sys

    agent, host = agent_and_host
    lifecycle = agent.capabilities["lifecycle"]
    try:
        raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    except MemoryError:
        sys.excepthook(*sys.exc_info())
    events = host.messages(lambda m: m["type"] == "stream" and m["capability"] == "lifecycle"
                           and any(e["event"] == "exit" for e in m["items"]))
    items = [e for m in events if m["type"] == "stream" and m["capability"] == "lifecycle" for e in m["items"]]
    exc = next(e for e in items if e["event"] == "exception")
    assert exc["type"] == "MemoryError" and "Tried to allocate" in exc["message"]
    assert exc["where"].startswith("test_agent_core.py:")
    assert lifecycle.ended


def test_capabilities_are_armed_by_name_with_options() -> None:
    from fieldguide.agent.inside.core import parse_arm

    assert parse_arm("memory:history, loop") == {"memory": frozenset({"history"}), "loop": frozenset()}
    assert parse_arm("") == {}


class AppendsWhenFoundEmpty(collections.deque):  # type: ignore[type-arg]
    """A queue the training thread appends to just after the agent's thread found it empty, with a
    second append to a queue registered after it: the interleaving that split a cut."""

    def __init__(self, then: collections.deque[Any]) -> None:
        super().__init__()
        self.then = then
        self.fired = False

    def __bool__(self) -> bool:
        empty = not len(self)
        if empty and not self.fired:
            self.fired = True
            self.append({"first_backward": 1.0})
            self.then.append(["step 1"])
        return not empty


def test_a_flush_never_sends_an_item_without_what_was_appended_before_it() -> None:
    inside, outside = socket.socketpair()
    try:
        agent = Agent(inside)
        steps: collections.deque[Any] = collections.deque()
        signals = AppendsWhenFoundEmpty(then=steps)
        agent._streams += [("loop", "signals", signals, None), ("loop", "steps", steps, None)]
        agent.flush()
        outside.setblocking(False)
        sent = [json.loads(line) for line in outside.recv(65536).splitlines()]
        assert [(m["name"], m["items"]) for m in sent] == [("signals", [{"first_backward": 1.0}]),
                                                            ("steps", [["step 1"]])]
    finally:
        inside.close()
        outside.close()


def stream_items(host: Host, capability: str, name: str) -> list[Any]:
    found = host.messages(lambda m: m["type"] == "stream" and (m["capability"], m["name"]) == (capability, name))
    return found[-1]["items"]


def test_the_rows_the_agent_writes_are_read_back_field_by_field(agent_and_host: tuple[Agent, Host]) -> None:
    """Each declared row (agent/inside/rows.py) crosses the socket as a JSON list and reads back,
    by name, as what the capability recorded."""
    from fieldguide.agent.inside.rows import CollectiveRow, MemoryRow, StepRow

    agent, host = agent_and_host
    loop = agent.capabilities["loop"]
    loop.boundary("o")  # the first boundary starts the clock: no row
    loop.loader_wait, loop.loader_cpu, loop.input_s, loop.input_cpu, loop.save_s = 0.011, 0.002, 0.013, 0.004, 0.005
    loop.backwards, loop.closures, loop.forwards, loop.batch_elements = 2, 3, 1, 4096
    loop.boundary("o")
    step = StepRow.read(stream_items(host, "loop", "steps")[0])
    assert (step.loader_wait_s, step.boundary, step.input_s, step.input_cpu_s, step.loader_cpu_s) == \
        (0.011, "o", 0.013, 0.004, 0.002)
    assert (step.backwards, step.closures, step.forwards, step.save_s, step.batch_elements) == (2, 3, 1, 0.005, 4096)
    assert 0 <= step.wall_s < 5 and abs(step.t_end - time.monotonic()) < 5

    collectives = agent.capabilities["collectives"]
    collectives.collective_s, collectives.backward_wait_s, collectives.backward_s, collectives.calls = 0.25, 0.125, 0.5, 7
    collectives.on_step()
    waited = CollectiveRow.read(stream_items(host, "collectives", "steps")[0])
    assert (waited.collective_s, waited.backward_wait_s, waited.backward_s, waited.calls) == (0.25, 0.125, 0.5, 7)

    memory = MemoryRow.read(json.loads(json.dumps(agent.capabilities["memory"].row())))
    assert memory.step == agent.step_count and memory.rss and memory.vms and memory.rss <= memory.vms
    assert memory.cuda_allocated is None and memory.cuda_reserved is None  # no torch here


def test_a_row_of_another_agent_version_reads_with_what_it_has() -> None:
    from fieldguide.agent.inside.rows import StepRow

    short = StepRow.read([1.0, 0.5, 0.0, "k"])
    assert (short.t_end, short.boundary, short.input_s, short.batch_elements) == (1.0, "k", None, None)
    longer = StepRow.read([*range(len(StepRow._fields)), "a field added later"])
    assert longer == tuple(range(len(StepRow._fields)))


def test_time_waiting_for_a_core_is_not_counted_as_waiting_for_the_other_ranks(monkeypatch) -> None:
    """On a busy machine the training thread sits runnable inside backward() and inside the job's
    collectives: that run-queue time is taken out of the wait for the other ranks."""
    import types

    from fieldguide.agent.inside.capabilities import collectives as module

    clock = {"wall": 100.0, "cpu": 10.0, "queued": 1.0}
    monkeypatch.setattr(module.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(module.time, "thread_time", lambda: clock["cpu"])
    monkeypatch.setattr(module, "run_queue_seconds", lambda: clock["queued"])

    def backward_that_waits(*args, **kwargs):  # 1 s of wall: 0.3 s computing, 0.5 s queued, 0.2 s waiting
        clock["wall"] += 1.0
        clock["cpu"] += 0.3
        clock["queued"] += 0.5

    def all_reduce(*args, **kwargs):  # 0.4 s of wall, 0.1 s of it queued once the data came
        clock["wall"] += 0.4
        clock["queued"] += 0.1

    fake_torch = types.SimpleNamespace(autograd=types.SimpleNamespace(backward=backward_that_waits),
                                       cuda=types.SimpleNamespace(is_initialized=lambda: False))
    capability = module.Collectives.__new__(module.Collectives)
    capability.collective_s = capability.backward_wait_s = capability.backward_s = 0.0
    capability.calls, capability.depth, capability.torch, capability.waited_total_s = 0, 0, fake_torch, 0.0
    capability.wrap_backward(fake_torch)
    fake_torch.autograd.backward()
    capability.timed(all_reduce)()
    assert round(capability.backward_wait_s, 6) == 0.2 and round(capability.backward_s, 6) == 1.0
    assert round(capability.collective_s, 6) == 0.3 and capability.calls == 1
    assert round(capability.waited_total_s, 6) == 0.5  # the op profile's running total: both waits



def test_a_reply_made_on_another_thread_is_sent_without_waiting_for_the_next_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With ticks a minute apart, only the wake-up can bring the training thread's reply over.
    import fieldguide.agent.inside.core as core

    monkeypatch.setattr(core, "FLUSH_SECONDS", 60.0)
    inside, outside = socket.socketpair()
    agent = Agent(inside)
    # As if torch were hooked already: the agent thread's backstop would hook this process's torch.
    agent.torch = types.ModuleType("torch")
    serving = threading.Thread(target=agent.serve, daemon=True)
    serving.start()
    try:
        time.sleep(0.1)  # the agent thread waits in select
        threading.Thread(target=agent.reply, args=(5, {"answer": 42})).start()
        outside.settimeout(10.0)
        received = b""
        while b'"reply"' not in received:
            received += outside.recv(65536)
        line = next(x for x in received.split(b"\n") if b'"reply"' in x)
        assert json.loads(line) == {"type": "reply", "id": 5, "ok": True, "result": {"answer": 42}}
    finally:
        agent.disabled = True
        outside.close()
        inside.close()
