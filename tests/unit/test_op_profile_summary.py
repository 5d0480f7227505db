"""The op profile's arithmetic on a constructed profiler: time waiting for data or for the other
ranks is neither the model's ops nor framework overhead."""

from __future__ import annotations

import types

import pytest

from fieldguide.agent.inside.capabilities.opprofile import summarize_profile


def _profiler(*ops_us: float) -> object:
    events = [types.SimpleNamespace(name="aten::mm", cpu_time_total=us, cpu_parent=None, device_type=None)
              for us in ops_us]
    return types.SimpleNamespace(events=lambda: events)


def test_time_waiting_for_the_other_ranks_is_not_counted_as_overhead() -> None:
    # 5 steps in 1 s: 0.4 s inside ops, 0.4 s waiting in the all-reduce, 0.2 s of Python around them.
    alone = summarize_profile(_profiler(*[80_000.0] * 5), 5, 1.0)
    assert alone["op_time_fraction"] == pytest.approx(0.4) and alone["ranks_wait_fraction"] == 0.0
    ranked = summarize_profile(_profiler(*[80_000.0] * 5), 5, 1.0, ranks_waited=0.4)
    assert ranked["op_time_fraction"] == pytest.approx(0.4 / 0.6)
    assert ranked["ranks_wait_fraction"] == pytest.approx(0.4)
