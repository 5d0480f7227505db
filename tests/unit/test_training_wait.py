"""Is the target training? The agent's wait for a step runs from its connection: a launched job
the walk already watched for its first steps is not watched again for as long."""

from __future__ import annotations

import socket
import time
import types

from fieldguide.agent.channel import AgentConnection
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.training import TrainingActivity


def served(connected_s_ago: float) -> tuple[ProbeContext, socket.socket, socket.socket]:
    ends = socket.socketpair()
    conn = AgentConnection(ends[0])
    conn.connected_at = time.monotonic() - connected_s_ago
    conn.stream("loop", "signals").items.append({"forwards_before_training": 200})
    agent = types.SimpleNamespace(primary=lambda: conn)
    target = types.SimpleNamespace(agent=agent, alive=lambda: True)
    return ProbeContext(target=target), *ends  # type: ignore[arg-type,return-value]


def test_a_job_watched_for_its_wait_already_is_judged_at_once() -> None:
    ctx, *ends = served(connected_s_ago=27.0)
    try:
        started = time.monotonic()
        m = TrainingActivity().run(ctx, wait=10.0)
        assert time.monotonic() - started < 1.0
        assert m.values["trains"] is False and m.values["steps_seen"] == 0
    finally:
        for end in ends:
            end.close()


def test_a_fresh_connection_still_gets_its_whole_wait() -> None:
    ctx, *ends = served(connected_s_ago=0.0)
    try:
        started = time.monotonic()
        TrainingActivity().run(ctx, wait=1.0)
        assert time.monotonic() - started >= 0.9
    finally:
        for end in ends:
            end.close()
