"""The in-job input sampler keeps to its budget, and runs only where nothing else reads the input."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from fieldguide.agent.inside.capabilities import loop as loop_capability
from fieldguide.agent.inside.core import Agent
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.loop import LoopSteps


@pytest.fixture
def agent() -> Any:
    inside, outside = socket.socketpair()
    made = Agent(inside)
    yield made
    made.disabled = True
    inside.close()
    outside.close()


def in_phase_thread(loop: Any, stop: threading.Event) -> threading.Thread:
    """A training thread that sits in its input phase (Python work, so it holds the GIL often)."""

    def work() -> None:
        loop.train_thread = threading.get_ident()
        loop.phase_t = time.monotonic()
        while not stop.is_set():
            sum(i * i for i in range(200))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    while loop.train_thread is None:
        time.sleep(0.001)
    return thread


def sample(agent: Any, seconds: float, rate: float) -> dict[str, Any]:
    loop = agent.capabilities["loop"]
    loop.start()
    stop = threading.Event()
    thread = in_phase_thread(loop, stop)
    try:
        loop.sample_input("r1", seconds, rate)
    finally:
        stop.set()
        thread.join()
    reply = [m for m in agent.outbox if m.get("id") == "r1"][0]
    assert reply["ok"], reply
    return reply["result"]


def test_the_sampler_stretches_its_period_to_stay_within_its_share(agent: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(loop_capability, "SAMPLER_SHARE", 1e-4)  # a budget a sample far exceeds here
    result = sample(agent, 1.0, 100.0)
    assert result["held_s"] / result["seconds"] <= 3e-4  # one sample's overshoot at most
    assert result["ticks"] < 50  # not the 100 a second asked for


def test_the_sampler_stops_once_it_has_enough_samples(agent: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(loop_capability, "ENOUGH_SAMPLES", 10)
    started = time.monotonic()
    result = sample(agent, 5.0, 100.0)
    assert result["in_phase"] == 10
    assert time.monotonic() - started < 2.0


class Conn:
    def __init__(self, rows: list[list[Any]]) -> None:
        self.capabilities = {"loop": {"requests": ["input_stacks"]}}
        self.steps = rows


class Target:
    agent = None


def row(loader_wait: float) -> list[Any]:
    return [time.monotonic(), 0.01, loader_wait, "o", 0.002, 0.001, 0.0, 1, 0, 1, 0.0, None]


@pytest.mark.parametrize(("loader_wait", "window", "sampled"), [
    (0.0, False, True),  # nothing else reads this job's input: sample it
    (0.0, True, False),  # the walk's py-spy window reads it from outside
    (0.002, False, False),  # a DataLoader's wait is timed
])
def test_the_sampler_runs_only_where_nothing_else_reads_the_input(
        loader_wait: float, window: bool, sampled: bool, monkeypatch: Any) -> None:
    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(LoopSteps, "ask", lambda self, ctx, params, timeout, name: asked.append(params))
    ctx = ProbeContext(target=Target(), window_coming=lambda probe_id: window and probe_id == "stacks.sample")
    background = LoopSteps()._sample_input_phase(ctx, Conn([row(loader_wait)] * 5), 1.0)
    if background is not None:
        background.result(timeout=5)
    assert (background is not None) is sampled
    assert bool(asked) is sampled


def test_a_walk_says_which_windows_are_measured_or_on_their_way() -> None:
    from fieldguide.measurement import Measurement
    from fieldguide.walk.runner import ProbeRunner, _Flight

    runner = ProbeRunner(Target(), budget=10)
    assert not runner.window_coming("stacks.sample")
    runner._inflight[("stacks.sample", "[]")] = _Flight()
    assert runner.window_coming("stacks.sample")
    assert not runner.window_coming("loop.steps")
    runner._inflight.clear()
    runner.cache[("stacks.sample", "[]")] = Measurement.cannot("stacks.sample", "py-spy is not permitted")
    assert not runner.window_coming("stacks.sample")  # a window that could not measure answers nothing
