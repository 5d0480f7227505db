"""The cold start of a real launched job: its timeline adds up to the wall time to steady steps,
measured apart from the agent's own marks."""

from __future__ import annotations

import sys
import time

import pytest

from fieldguide import workloads
from fieldguide.playbook import find_playbook
from fieldguide.targets import LaunchTarget
from fieldguide.walk.session import Session

pytestmark = pytest.mark.integration


def test_the_timeline_adds_up_to_the_wall_time_to_steady_steps(monkeypatch):
    monkeypatch.setenv("FIELDGUIDE_WORKLOAD_SECONDS", "40")
    t0 = time.monotonic()  # ours, before fieldguide's own spawn time
    target = LaunchTarget([sys.executable, str(workloads.path("start_checkpoint_slow_storage"))])
    try:
        session = Session(find_playbook("slow-start"), target)
        findings = session.run()
        conn = target.agent.primary()
        step_ends = [row[0] for row in conn.steps]  # the loop capability's own step ends
    finally:
        target.close()
    cold = findings.cold_start
    assert cold is not None and cold["steady"], cold
    timeline = sum(phase["seconds"] for phase in cold["phases"])
    # The wall time to steady steps, measured apart: from our clock before the launch to the loop
    # capability's end of the step before the steady one.
    steady_at = t0 + cold["total_s"]
    nearest = min(step_ends, key=lambda t: abs(t - steady_at))
    wall = nearest - t0
    assert abs(timeline - wall) <= 0.05 * wall, (timeline, wall, cold)
    # The load it was built around is where the time went, and the walk says so.
    assert cold["shares"]["checkpoint"] >= 0.33 * cold["total_s"], cold
    assert findings.first_departure is not None
    assert findings.first_departure["cause"] == "start.checkpoint_load"
