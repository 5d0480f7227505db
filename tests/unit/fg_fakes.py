"""Shared fakes for the unit tests: constructed measurements and a fake `measure` callable."""

from __future__ import annotations

import copy
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import registry

LAUNCH = frozenset({"process", "agent"})
ATTACH = frozenset({"process"})


def healthy_values() -> dict[str, dict[str, Any]]:
    """Per probe id, the values of a healthy training loop (each node of slow-training passes)."""
    return {
        "training.activity": {"trains": True, "seen_by": "agent", "steps_seen": 50, "step_signal": "optimizer.step"},
        "torch.flags": {"anomaly_detection": False, "autograd_profiler": False, "sync_debug_mode": "default",
                        "sync_debug_on": False, "cuda_launch_blocking": False, "deterministic_algorithms": False,
                        "torch": "2.13.0", "cuda": None, "num_threads": 4, "debug_switches_on": 0,
                        "debug_switches": "none"},
        "torch.flags.outside": {"cuda_launch_blocking": False, "anomaly_trace_fraction": 0.0, "anomaly_trace_samples": 0, "debug_switches": "none seen",
                                "profiler_fraction": 0.0},
        "loop.steps": {"steps": 40, "boundary": "optimizer.step", "input_from": "DataLoader.__next__",
                       "step_ms_median": 25.0, "step_ms_p90": 27.0,
                       "data_wait_ms_median": 0.5, "data_wait_ms_p90": 0.8, "data_wait_fraction": 0.02,
                       "steps_per_second": 40.0, "epoch_starts": 0, "first_batch_ms_median": None,
                       "startup_wait_fraction": 0.0, "io_fraction": 0.0, "save_fraction": 0.0},
        "stacks.sample": {"samples": 300, "workers_sampled": 2, "data_wait_fraction": 0.03,
                          "startup_wait_fraction": 0.0, "workers_replaced": False, "producer": "workers",
                          "producer_cpu_fraction": 0.2, "worker_producing_fraction": 0.3, "io_fraction": 0.01,
                          "sleep_fraction": 0.0, "lock_wait_fraction": 0.0, "collective_fraction": 0.0,
                          "device_sync_fraction": 0.0, "blocked_other_fraction": 0.02,
                          "anomaly_trace_fraction": 0.0, "anomaly_trace_samples": 0,
                          "profiler_fraction": 0.0, "forward_fraction": 0.4, "backward_fraction": 0.4,
                          "optimizer_fraction": 0.1, "bookkeeping_fraction": 0.05,
                          "bookkeeping_at": "format_meter (tqdm) 100%", "loop_work_fraction": 0.02,
                          "loop_work_at": "log_every (train.py:40)", "gc_fraction": 0.0},
        "process.cpu": {"usable_cores": 8, "main_cpu_cores": 1.0, "worker_count": 2, "worker_cpu_cores": 0.4,
                        "worker_cores_mean": 0.2, "tree_cpu_fraction": 0.18, "voluntary_switch_share": 0.9,
                        "rss_mb": 900.0, "rss_growth_mb_per_min": 0.0, "workers_spawned": 0},
        "dist.ranks": {"world_size": 1, "ranks_seen": 1, "ranks_remote": 0, "own_work_ratio": 1.0, "others_wait_fraction": 0.0, "wait_gap": 0.0,
                       "comm_fraction_min": 0.0, "comm_fraction_max": 0.0, "comm_fraction_mean": 0.0},
        "torch.ops": {"ops_per_step": 200.0, "median_op_us": 50.0, "op_time_fraction": 0.9, "profiled_steps": 5,
                      "profiled_step_ms": 25.0, "loader_fraction": 0.01, "overhead_fraction": 0.1,
                      "overhead_detail": "200 ops a step with a median of 50.0 µs; 90% of step time inside ops"},
        "torch.efficiency": {"gflop_per_step": 2.5, "dtype_mix": "float32 on cpu 100%", "slow_dtype_fraction": 0.0,
                             "slow_dtype": "", "precision_from": None, "achieved_gflops": 100.0, "peak_gflops": 150.0,
                             "peak_fraction": 0.67, "intra_op_threads": 8, "usable_cores": 8.0, "idle_cores": 0.2,
                             "threads_from": "torch's default here", "long_op_fraction": 0.7, "threads_gain": 0.0},
        "stacks.native": {"slow_dtype_fraction": 0.0, "slow_dtype": "", "blas_samples": 12, "samples": 20},
    }


class FakeMeasure:
    """A `measure(option)` callable: constructed Measurements per probe id, and a log of calls.

    `values[probe]` may be a dict of values, or a Measurement (returned as is, e.g. Measurement.cannot).
    A probe with no entry cannot measure ("not in the fake").
    """

    def __init__(self, values: dict[str, Any]):
        self.values = values
        self.calls: list[str] = []

    def __call__(self, option: Any) -> Measurement:
        self.calls.append(option.probe)
        spec = self.values.get(option.probe)
        if spec is None:
            return Measurement.cannot(option.probe, "not in the fake")
        if isinstance(spec, Measurement):
            return copy.deepcopy(spec)
        cls = registry.get(option.probe)
        units = {k: v for k, v in (cls.values if cls else {}).items() if v}
        return Measurement(probe=option.probe, values=dict(spec), units=units,
                           evidence={"from": f"fake {option.probe}"}, provenance="constructed", seconds=0.25)


def record_contention(measurement: Any, reading: dict[str, Any]) -> None:
    """What the runner does to a measurement taken in a window with this contention `reading`
    (its margins widened, unless the probe weighed contention itself), without a target."""
    from fieldguide.walk.runner import ProbeRunner

    class Window:
        def finish(self) -> dict[str, Any]:
            return dict(reading)

    runner = ProbeRunner.__new__(ProbeRunner)
    runner.windows = []
    runner._record_contention(measurement, Window())


# A small playbook of its own for the report's and the views' tests: three questions in the shape
# of a real walk (does it train, does it wait, is the wait CPU work), a refining node, a stop, a
# healthy leaf. Adding a node to a shipped playbook touches none of the tests that use it.
SMALL_PLAYBOOK = """\
id: small
title: A small walk
purpose: Three questions in the shape of a real walk, for the report's tests.
start: trains
leaves:
  device.compute_bound: Steps are spent computing.
nodes:
  - id: trains
    question: Does it train?
    why: No step, no cause.
    measure:
      - probe: training.activity
        expect:
          trains: {equals: true}
    pass: waits
    depart: {stop: "not a training job, so no cause: {seen}"}
    error: {stop: "could not tell whether it trains, so no cause"}
  - id: waits
    question: Does each step wait for its next batch?
    why: A wait is idle time.
    measure:
      - probe: loop.steps
        expect:
          data_wait_fraction: {below: 0.10}
      - probe: stacks.sample
        expect:
          data_wait_fraction: {below: 0.10}
    pass: blocks
    depart: makes
  - id: makes
    question: Is making a batch CPU work?
    why: The two starvations need opposite fixes.
    measure:
      - probe: loop.steps
        expect:
          producer_cpu_fraction: {below: 0.5}
      - probe: stacks.sample
        expect:
          producer_cpu_fraction: {below: 0.5}
    pass: {cause: input.waiting}
    depart: {cause: input.cpu_bound}
  - id: blocks
    question: Does the step block on file I/O?
    why: A write blocks the step.
    measure:
      - probe: stacks.sample
        expect:
          io_fraction: {below: 0.10}
    pass: {leaf: device.compute_bound}
    depart: {cause: host.blocking_io}
"""
