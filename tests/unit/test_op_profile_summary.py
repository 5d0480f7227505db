"""The op profile's arithmetic on constructed traces: time waiting for data or for the other ranks
is neither the model's ops nor framework overhead, and ops nest by their spans on their thread."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.analysis.optrace import summarize_events, trace_events


def op(name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_time_waiting_for_the_other_ranks_is_not_counted_as_overhead() -> None:
    # 5 steps in 1 s: 0.4 s inside ops, 0.4 s waiting in the all-reduce, 0.2 s of Python around them.
    trace = {"traceEvents": [op("aten::mm", k * 200_000.0, 80_000.0) for k in range(5)]}
    alone = summarize_events(trace_events(trace), 5, 1.0)
    assert alone["op_time_fraction"] == pytest.approx(0.4) and alone["ranks_wait_fraction"] == 0.0
    ranked = summarize_events(trace_events(trace), 5, 1.0, ranks_waited=0.4)
    assert ranked["op_time_fraction"] == pytest.approx(0.4 / 0.6)
    assert ranked["ranks_wait_fraction"] == pytest.approx(0.4)


def test_ops_inside_ops_or_the_loader_count_once_and_threads_do_not_nest() -> None:
    trace = {"traceEvents": [
        op("ProfilerStep#0", 0.0, 1000.0, cat="user_annotation"),
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10.0, 200.0, cat="user_annotation"),
        op("aten::stack", 20.0, 100.0),  # collate: the loader's, not the model's
        op("aten::linear", 300.0, 300.0),
        op("aten::addmm", 310.0, 280.0),  # inside linear
        op("aten::linear", 300.0, 300.0, tid=2),  # another thread, the same span: its own op
        op("aten::relu", 600.0, 100.0),  # starts where linear ends: a sibling, not a child
        {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "pid": 7, "tid": 1, "ts": 300.0},  # flows: not events
        {"ph": "X", "cat": "cpu_op", "name": "aten::broken"},  # no span: left out
        op("void gemm_kernel<float>", 320.0, 250.0, tid=7, cat="kernel"),
        op("Memcpy HtoD (Pageable -> Device)", 5.0, 40.0, tid=7, cat="gpu_memcpy"),
    ]}
    profile = summarize_events(trace_events(trace), 1, 0.001)
    assert {o["op"]: o["count"] for o in profile["top_ops"]} == {"aten::linear": 2, "aten::relu": 1}
    assert profile["loader_fraction"] == pytest.approx(0.2)
    # 700 µs of ops over the 800 µs the loader leaves (two threads' ops: capped at the whole)
    assert profile["op_time_fraction"] == pytest.approx(min(700.0 / 800.0, 1.0))
    assert profile["kernels_per_step"] == 1 and profile["h2d_pageable_per_step"] == 1
    assert profile["device_time_us"] == pytest.approx(290.0)
