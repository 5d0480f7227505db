"""Walks of the real slow-training playbook over constructed measurements, and the ProbeRunner's cache."""

from __future__ import annotations

from typing import Any

import pytest
from fg_fakes import ATTACH, LAUNCH, FakeMeasure, healthy_values

from fieldguide.measurement import Measurement
from fieldguide.playbook import load_playbook, parse_expectation
from fieldguide.playbook.schema import Edge, MeasureOption, Node
from fieldguide.probes import register, registry
from fieldguide.probes.base import Probe, ProbeContext
from fieldguide.walk.engine import (
    CLEAN,
    DEPART,
    DEPARTURE,
    ERROR,
    INCONCLUSIVE,
    PASS,
    SKIP,
    Walk,
    judge,
)
from fieldguide.walk.runner import ProbeRunner

ALL_NODES = ["target.trains", "dist.ranks", "dist.comm", "env.debug-flags", "input.worker-startup", "input.data-wait", "host.blocking-io", "host.loop-work", "host.overhead", "device.efficiency", "host.threads"]


def statuses(walk: Walk) -> list[tuple[str, str]]:
    return [(r.node, r.status) for r in walk.path]


# --- (a) healthy, launch mode ---------------------------------------------------------------------

def test_healthy_launch_walk_is_clean(walk_with):
    walk, fake = walk_with()
    assert walk.finished
    assert statuses(walk) == [(n, PASS) for n in ALL_NODES]
    assert walk.verdict == CLEAN
    assert walk.conclusion == "device.compute_bound"
    assert walk.departure is None
    assert fake.calls == ["training.activity", "dist.ranks", "dist.ranks", "torch.flags", "loop.steps", "loop.steps", "loop.steps",
                          "stacks.sample", "torch.ops", "torch.efficiency", "torch.efficiency"]
    trains = walk.path[0]
    assert trains.probe == "training.activity"
    assert trains.measured == {"trains": True}
    assert trains.expected == "trains == true"
    assert trains.note == "" and trains.seconds == 0.25
    flags = walk.path[3]
    assert flags.probe == "torch.flags"
    assert flags.measured == {"anomaly_detection": False, "autograd_profiler": False, "sync_debug_on": False,
                              "cuda_launch_blocking": False}
    assert flags.expected == ("anomaly_detection == false and autograd_profiler == false and "
                              "sync_debug_on == false and cuda_launch_blocking == false")
    assert flags.note == "" and flags.seconds == 0.25
    # Overhead is a measured share of the step outside ops; op counts and sizes alone decide nothing.
    assert walk.path[-3].expected == "overhead_fraction < 0.5"
    # Past compute-bound: the dtype of the step's FLOPs and its threads against its cores.
    assert walk.path[-2].expected == "slow_dtype_fraction < 0.5" and walk.path[-1].expected == "threads_gain < 0.15"


def test_step_by_step_and_callback(slow_training):
    fake = FakeMeasure(healthy_values())
    walk = Walk(slow_training, lambda: set(LAUNCH), fake)
    assert walk.current == "target.trains" and not walk.finished
    first = walk.step()
    assert first.node == "target.trains" and walk.current == "dist.ranks"
    seen: list[str] = []
    walk.run(on_result=lambda r: seen.append(r.node))
    assert seen == ALL_NODES[1:]
    assert walk.step() is None


def test_a_node_cut_short_by_a_stop_is_not_recorded_and_the_walk_stays_on_it(slow_training):
    stopped = []

    class StopAtFlags(FakeMeasure):
        def __call__(self, option: Any) -> Measurement:
            if option.probe == "torch.flags":
                stopped.append(True)  # the user interrupts while this node measures
            if stopped:
                return Measurement.cannot(option.probe, "cancelled")
            return super().__call__(option)

    walk = Walk(slow_training, lambda: set(LAUNCH), StopAtFlags(healthy_values()))
    seen: list[str] = []
    walk.run(on_result=lambda r: seen.append(r.node), stop=lambda: bool(stopped))
    assert seen == ["target.trains", "dist.ranks", "dist.comm"]
    assert [r.node for r in walk.path] == seen
    assert walk.current == "env.debug-flags" and not walk.finished


def test_run_node_does_not_move_the_walk(slow_training):
    walk = Walk(slow_training, lambda: set(LAUNCH), FakeMeasure(healthy_values()))
    result = walk.run_node("host.blocking-io")
    assert result.status == PASS and result.probe == "loop.steps"
    assert walk.path == [] and walk.current == "target.trains"


# --- (b), (c) input starvation ---------------------------------------------------------------------

def test_data_wait_with_waiting_producer_is_input_waiting(walk_with):
    walk, fake = walk_with({"loop.steps": {"data_wait_fraction": 0.8},
                            "stacks.sample": {"producer_cpu_fraction": 0.1, "data_wait_fraction": 0.5}})
    # The input share departed and its cause is named; the walk goes on over the other shares.
    assert statuses(walk) == [("target.trains", PASS), ("dist.ranks", PASS), ("dist.comm", PASS), ("env.debug-flags", PASS), ("input.worker-startup", PASS),
                              ("input.data-wait", DEPART), ("input.producer", PASS), ("host.blocking-io", PASS),
                              ("host.loop-work", PASS), ("host.overhead", PASS), ("device.efficiency", PASS), ("host.threads", PASS)]
    assert walk.verdict == DEPARTURE
    d = walk.departure
    assert d.node == "input.data-wait"  # the first departure, not the producer node after it
    assert d.cause.id == "input.waiting"
    assert d.measured == {"data_wait_fraction": 0.8, "producer_cpu_fraction": 0.1}
    assert d.expected == "data_wait_fraction < 0.1 ; producer_cpu_fraction < 0.5"
    # The loop's own timing (first measured) speaks for data_wait_fraction, not the stack estimate.
    assert d.summary.startswith("80% of each step is spent waiting for the next batch (in DataLoader.__next__)")
    assert "(workers)" in d.summary and "only 10% of the" in d.summary
    assert "50%" not in d.summary
    assert set(d.evidence) == {"input.data-wait", "input.producer"}
    assert walk.conclusion is None and walk.also == []
    assert d.share == 0.8 and d.share_name == "data_wait_fraction"
    # input.producer asks the loop first: these loop values have no producer_cpu_fraction, so the stacks decide.
    producer = walk.path[6]
    assert producer.probe == "stacks.sample"
    assert producer.note == "loop.steps: no value for producer_cpu_fraction (not measured for this target)"
    assert fake.calls == ["training.activity", "dist.ranks", "dist.ranks", "torch.flags", "loop.steps", "loop.steps", "loop.steps",
                          "stacks.sample", "loop.steps", "stacks.sample", "torch.ops", "torch.efficiency", "torch.efficiency"]


def test_data_wait_with_cpu_bound_producer_is_input_cpu_bound(walk_with):
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.8},
                         "stacks.sample": {"producer_cpu_fraction": 0.9, "producer": "main process"}})
    assert statuses(walk)[5:7] == [("input.data-wait", DEPART), ("input.producer", DEPART)]
    d = walk.departure
    assert d.node == "input.data-wait"
    assert d.cause.id == "input.cpu_bound"
    assert d.summary.startswith("80% of each step is spent waiting for the next batch (in DataLoader.__next__)")
    assert "(main process) is on the CPU 90% of the time" in d.summary


def test_producer_falls_back_to_process_cpu_when_stacks_cannot_tell(walk_with):
    walk, fake = walk_with({"loop.steps": {"data_wait_fraction": 0.6},
                            # Why the value is missing travels in the Measurement, not in the engine.
                            "stacks.sample": Measurement(
                                probe="stacks.sample", values={"producer_cpu_fraction": None, "producer": None},
                                missing={"producer_cpu_fraction": "too few samples producing batches to tell"}),
                            "process.cpu": {"worker_cores_mean": 0.95}})
    producer = walk.path[6]
    assert producer.node == "input.producer" and producer.status == DEPART
    assert producer.probe == "process.cpu"
    assert producer.measured == {"worker_cores_mean": 0.95}
    assert producer.note == ("loop.steps: no value for producer_cpu_fraction (not measured for this target); "
                             "stacks.sample: no value for producer_cpu_fraction "
                             "(too few samples producing batches to tell)")
    assert walk.departure.cause.id == "input.cpu_bound"
    assert fake.calls[6:9] == ["loop.steps", "stacks.sample", "process.cpu"]


def test_producer_cpu_from_the_loop_decides_first(walk_with):
    """Batches made on the training thread (no DataLoader workers): the loop's own CPU time decides
    input.producer, and neither the stack sampler nor process.cpu is asked."""
    input_from = "the input phase (end of a step to the next forward)"
    walk, fake = walk_with({"loop.steps": {"data_wait_fraction": 0.6, "input_from": input_from,
                                           "producer": "the training thread", "producer_cpu_fraction": 0.9}})
    assert statuses(walk)[5:7] == [("input.data-wait", DEPART), ("input.producer", DEPART)]
    producer = walk.path[6]
    assert producer.probe == "loop.steps" and producer.note == ""
    assert producer.measured == {"producer_cpu_fraction": 0.9}
    assert producer.expected == "producer_cpu_fraction < 0.5"
    d = walk.departure
    assert d.node == "input.data-wait" and d.cause.id == "input.cpu_bound"
    assert d.summary.startswith(f"60% of each step is spent waiting for the next batch (in {input_from}), "
                                "and the code producing batches (the training thread) is on the CPU 90% of the")
    assert fake.calls == ["training.activity", "dist.ranks", "dist.ranks", "torch.flags", "loop.steps", "loop.steps", "loop.steps",
                          "loop.steps", "stacks.sample", "torch.ops", "torch.efficiency", "torch.efficiency"]


def test_producer_values_missing_from_the_loop_come_from_the_node_that_measured_them(walk_with):
    """With DataLoader workers the real loop.steps reports producer and producer_cpu_fraction as None
    (and says why); the stacks measure them, and the summary must say what they measured, not n/a."""
    values = {**healthy_values()["loop.steps"], "data_wait_fraction": 0.8, "producer": None,
              "producer_cpu_fraction": None}
    loop = Measurement(probe="loop.steps", values=values,
                       missing={"producer_cpu_fraction": "batches come from DataLoader worker processes"})
    walk, _ = walk_with({"loop.steps": loop, "stacks.sample": {"producer_cpu_fraction": 0.1}})
    assert walk.path[6].probe == "stacks.sample"
    assert walk.departure.cause.id == "input.waiting"
    assert "n/a" not in walk.departure.summary
    assert "(workers) is on the CPU only 10% of the" in walk.departure.summary


def test_worker_startup_departure(walk_with):
    walk, _ = walk_with({"loop.steps": {"startup_wait_fraction": 0.4, "epoch_starts": 12,
                                        "first_batch_ms_median": 850.0}})
    assert ("input.worker-startup", DEPART) in statuses(walk)
    d = walk.departure
    assert d.cause.id == "input.worker_startup" and d.node == "input.worker-startup"
    assert d.summary.startswith("40% of wall time is spent waiting for new DataLoader iterators")


def test_blocking_io_departure(walk_with):
    """Launched: the loop's timed torch.save and sampled I/O decide, whatever the outside window saw."""
    walk, _ = walk_with({"loop.steps": {"io_fraction": 0.16, "save_fraction": 0.16},
                         "stacks.sample": {"io_fraction": 0.06}})
    assert statuses(walk)[-5] == ("host.blocking-io", DEPART)
    d = walk.departure
    assert d.cause.id == "host.blocking_io" and walk.path[-5].probe == "loop.steps"
    assert d.measured == {"io_fraction": 0.16}
    assert d.summary.startswith("16% of the training thread's time is in serialization or file/network I/O")


def test_blocking_io_departure_from_outside(walk_with):
    walk, _ = walk_with({"stacks.sample": {"io_fraction": 0.3, "blocked_other_fraction": 0.05}}, caps=ATTACH)
    assert ("host.blocking-io", DEPART) in statuses(walk)
    assert walk.departure is not None and walk.departure.measured == {"io_fraction": 0.3}


@pytest.mark.parametrize("value", ["sleep_fraction", "lock_wait_fraction", "collective_fraction",
                                   "device_sync_fraction", "blocked_other_fraction"])
def test_blocked_outside_io_is_not_blocking_io(walk_with, value):
    """A loop that sleeps, waits on a lock, a collective or the device, or is blocked on something the
    stacks cannot name, is not doing file or network I/O: host.blocking-io passes."""
    walk, _ = walk_with({"stacks.sample": {"io_fraction": 0.01, value: 0.6}}, caps=ATTACH)
    assert ("host.blocking-io", PASS) in statuses(walk)
    assert walk.departure is None or walk.departure.cause.id != "host.blocking_io"


def test_overhead_departure(walk_with):
    walk, _ = walk_with({"torch.ops": {"ops_per_step": 20000.0, "median_op_us": 3.0, "op_time_fraction": 0.3,
                                       "overhead_fraction": 0.7,
                                       "overhead_detail": "20000 ops a step with a median of 3.0 µs"}})
    d = walk.departure
    assert d.cause.id == "host.overhead_bound" and d.node == "host.overhead"
    assert d.cause.title == "Framework and Python overhead, not compute, sets the step time"
    assert d.summary.startswith("70% of each step is spent outside ops, not in the model's compute (20000 ops a step with a "
                                "median of 3.0 µs)")


# --- (d) attach mode ---------------------------------------------------------------------------------

def test_attach_mode_uses_outside_probes_and_skips_agent_only_nodes(walk_with):
    walk, fake = walk_with(caps=ATTACH)
    assert statuses(walk) == [("target.trains", PASS), ("dist.ranks", PASS), ("dist.comm", PASS), ("env.debug-flags", PASS), ("input.worker-startup", PASS),
                              ("input.data-wait", PASS), ("host.blocking-io", PASS), ("host.loop-work", PASS),
                              ("host.overhead", PASS), ("device.efficiency", PASS), ("host.threads", SKIP)]
    assert [r.probe for r in walk.path] == ["training.activity", "dist.ranks", "dist.ranks", "torch.flags.outside", "stacks.sample",
                                            "stacks.sample", "stacks.sample", "stacks.sample", "stacks.sample",
                                            "stacks.native", None]
    assert "torch.flags" not in fake.calls and "loop.steps" not in fake.calls and "torch.ops" not in fake.calls
    flags = walk.path[3]
    assert flags.measured == {"cuda_launch_blocking": False, "anomaly_trace_samples": 0, "profiler_fraction": 0.0}
    assert flags.note.startswith("torch.flags needs the in-process agent")
    overhead = walk.path[-3]
    # Ops are profiled only inside the job; from outside, a trainer's own code in the stacks.
    assert overhead.measured == {"bookkeeping_fraction": 0.05} and overhead.expected == "bookkeeping_fraction < 0.4"
    assert walk.verdict == CLEAN
    assert walk.conclusion == "device.compute_bound"


def test_attach_mode_names_a_trainers_bookkeeping_as_overhead(walk_with):
    walk, _ = walk_with({"stacks.sample": {"bookkeeping_fraction": 0.57, "overhead_fraction": 0.57,
                                           "overhead_detail": "the training thread in a framework's own code in 57% "
                                                              "of its samples, most in LightningModule.log (lightning) 40%"}},
                        caps=ATTACH)
    d = walk.departure
    assert d.node == "host.overhead" and d.cause.id == "host.overhead_bound"
    assert d.summary.startswith("57% of each step is spent outside ops") and "LightningModule.log (lightning)" in d.summary


def test_attach_mode_starvation_from_stacks(walk_with):
    walk, _ = walk_with({"stacks.sample": {"data_wait_fraction": 0.7, "producer_cpu_fraction": 0.85}}, caps=ATTACH)
    d = walk.departure
    assert d.node == "input.data-wait" and d.cause.id == "input.cpu_bound"
    assert d.summary.startswith("70% of each step")
    assert "85%" in d.summary


def test_attach_mode_cuda_launch_blocking_departs(walk_with):
    walk, _ = walk_with({"torch.flags.outside": {"cuda_launch_blocking": True}}, caps=ATTACH)
    assert statuses(walk) == [("target.trains", PASS), ("dist.ranks", PASS), ("dist.comm", PASS), ("env.debug-flags", DEPART)]
    assert walk.departure.cause.id == "host.debug_mode"
    assert walk.departure.measured["cuda_launch_blocking"] is True


def test_attach_mode_debug_summary_names_the_switch(walk_with):
    walk, _ = walk_with({"torch.flags.outside": {"cuda_launch_blocking": True,
                                                 "debug_switches": "cuda_launch_blocking"}}, caps=ATTACH)
    assert "n/a" not in walk.departure.summary
    assert "CUDA_LAUNCH_BLOCKING" in walk.departure.summary.upper()


def test_attach_mode_worker_startup_summary_has_no_missing_values(walk_with):
    walk, _ = walk_with({"stacks.sample": {"startup_wait_fraction": 0.5}}, caps=ATTACH)
    assert walk.departure.cause.id == "input.worker_startup"
    assert "n/a" not in walk.departure.summary


def test_local_target_skips_target_trains_and_stops_inconclusive(walk_with):
    """A skip follows the error edge: without a process nothing shows that the target trains, so the
    walk stops at its first node."""
    walk, fake = walk_with(caps=frozenset())
    assert statuses(walk) == [("target.trains", SKIP)]
    assert fake.calls == []
    assert walk.finished
    assert walk.verdict == INCONCLUSIVE
    assert walk.departure is None and walk.conclusion is None
    assert walk.path[0].note == "training.activity needs a target process (--pid or -- CMD)"
    assert walk.caveat == ("could not tell whether it trains, so no cause: "
                           "training.activity needs a target process (--pid or -- CMD)")


def test_a_walk_that_skips_every_node_is_inconclusive(slow_training):
    """Past target.trains (a walk started at its second node), nodes a local target cannot measure are
    skipped and the walk goes on to the leaf, which is not clean when nothing was measured."""
    fake = FakeMeasure(healthy_values())
    walk = Walk(slow_training, lambda: set(), fake)
    walk.current = "env.debug-flags"
    walk.run()
    assert statuses(walk) == [(n, SKIP) for n in ALL_NODES[3:]]
    assert fake.calls == []
    assert walk.verdict == INCONCLUSIVE
    assert walk.caveat == "no node could be measured on this target"
    assert "needs a target process (--pid or -- CMD)" in walk.path[0].note


# --- (e) errors ---------------------------------------------------------------------------------------

def test_every_probe_cannot_measure_stops_at_target_trains(walk_with):
    reason = "the agent stopped answering"
    base = {probe: Measurement.cannot(probe, reason) for probe in healthy_values()}
    walk, fake = walk_with(base=base)
    assert statuses(walk) == [("target.trains", ERROR)]
    assert fake.calls == ["training.activity"]
    assert walk.path[0].note == f"training.activity: {reason}"
    assert walk.path[0].measured == {} and walk.path[0].probe is None
    assert walk.finished
    assert walk.verdict == INCONCLUSIVE
    assert walk.departure is None and walk.conclusion is None
    assert walk.caveat == f"could not tell whether it trains, so no cause: training.activity: {reason}"


def test_a_target_that_does_not_train_departs_and_ends_inconclusive_with_what_was_seen(walk_with):
    """Not training is a reading (trains: false), not a failure to measure: target.trains departs,
    and its stop says what was seen."""
    why = "forward only: a model being served, not trained in 300 samples over 6 s"
    walk, fake = walk_with({"training.activity": {"trains": False, "seen": why}})
    assert statuses(walk) == [("target.trains", DEPART)]
    assert fake.calls == ["training.activity"]  # no debug flags, loop or stacks measured for it
    trains = walk.path[0]
    assert trains.probe == "training.activity" and trains.measured == {"trains": False}
    assert trains.expected == "trains == true"
    assert walk.finished
    assert walk.verdict == INCONCLUSIVE
    assert walk.departure is None and walk.conclusion is None
    assert walk.caveat == f"not a training job, so no cause: {why}"


def test_every_check_after_target_trains_cannot_measure_gives_errors_and_inconclusive(walk_with):
    reason = "the agent stopped answering"
    base = {probe: Measurement.cannot(probe, reason) for probe in healthy_values()}
    base["training.activity"] = healthy_values()["training.activity"]
    walk, _ = walk_with(base=base)
    assert statuses(walk) == [("target.trains", PASS)] + [(n, ERROR) for n in ALL_NODES[1:]]
    assert walk.path[3].note == f"torch.flags: {reason}; torch.flags.outside: {reason}"
    assert walk.path[5].note == f"loop.steps: {reason}; stacks.sample: {reason}"
    assert walk.path[7].note == f"stacks.sample: {reason}"
    assert walk.path[8].note == f"torch.ops: {reason}; stacks.sample: {reason}"
    assert all(r.measured == {} and r.probe is None for r in walk.path[1:])
    assert walk.verdict == INCONCLUSIVE
    assert walk.departure is None
    assert walk.caveat.startswith("could not measure dist.ranks (dist.ranks: the agent")
    assert "env.debug-flags (torch.flags: the agent" in walk.caveat


def test_error_keeps_walking_but_a_leaf_past_an_error_is_not_clean(walk_with):
    walk, _ = walk_with({"torch.flags": Measurement.cannot("torch.flags", "torch not imported"),
                         "torch.flags.outside": Measurement.cannot("torch.flags.outside", "no py-spy")})
    assert statuses(walk)[:4] == [("target.trains", PASS), ("dist.ranks", PASS), ("dist.comm", PASS), ("env.debug-flags", ERROR)]
    assert [s for _, s in statuses(walk)[4:]] == [PASS] * 7
    assert walk.conclusion == "device.compute_bound"
    assert walk.verdict == INCONCLUSIVE  # the debug switches were never ruled out
    assert "env.debug-flags (torch.flags: torch not imported" in walk.caveat


def test_first_option_error_second_option_decides(walk_with):
    walk, _ = walk_with({"loop.steps": Measurement.cannot("loop.steps", "only 1 training steps in 6 s"),
                         "stacks.sample": {"data_wait_fraction": 0.04, "startup_wait_fraction": 0.01}})
    startup = walk.path[4]
    assert startup.node == "input.worker-startup"
    assert startup.status == PASS and startup.probe == "stacks.sample"
    assert startup.note == "loop.steps: only 1 training steps in 6 s"
    assert startup.seconds == 0.25  # the failed option cost 0 s here, the stacks one 0.25 s


def test_missing_value_in_every_option_is_an_error_with_the_reason(walk_with):
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": None},
                         "stacks.sample": {"data_wait_fraction": None}})
    data_wait = walk.path[5]
    assert data_wait.node == "input.data-wait"
    assert data_wait.status == ERROR
    assert data_wait.note == ("loop.steps: no value for data_wait_fraction (not measured for this target); "
                              "stacks.sample: no value for data_wait_fraction (not measured for this target)")
    assert data_wait.seconds == 0.5
    assert walk.verdict == INCONCLUSIVE  # the walk went on (error follows the pass edge), but data wait was never ruled out
    assert walk.conclusion == "device.compute_bound"


def test_departure_whose_cause_node_errors_is_inconclusive(walk_with):
    walk, _ = walk_with({"loop.steps": {"data_wait_fraction": 0.9},
                         "stacks.sample": Measurement.cannot("stacks.sample", "ptrace not permitted"),
                         "process.cpu": Measurement.cannot("process.cpu", "the target exited")})
    assert statuses(walk)[6] == ("input.producer", ERROR)
    assert walk.finished
    # The walk went on over the other shares, and none departed: no cause, and not clean.
    assert walk.verdict == INCONCLUSIVE and walk.departure is None and walk.conclusion == "device.compute_bound"
    assert "a share of the step departed, but its cause was not named: input.producer could not decide the " \
           "cause: " in walk.caveat
    assert "ptrace not permitted" in walk.caveat


def test_skip_then_error_is_an_error_with_both_reasons(walk_with):
    walk, _ = walk_with({"torch.flags.outside": Measurement.cannot("torch.flags.outside", "access denied")},
                        caps=ATTACH)
    flags = walk.path[3]
    assert flags.node == "env.debug-flags"
    assert flags.status == ERROR
    assert flags.note.startswith("torch.flags needs the in-process agent")
    assert flags.note.endswith("; torch.flags.outside: access denied")


# --- (f) debug flags ---------------------------------------------------------------------------------

def test_debug_flags_on_is_host_debug_mode(walk_with):
    walk, fake = walk_with({"torch.flags": {"anomaly_detection": True, "debug_switches_on": 1,
                                            "debug_switches": "anomaly_detection"}})
    assert statuses(walk) == [("target.trains", PASS), ("dist.ranks", PASS), ("dist.comm", PASS), ("env.debug-flags", DEPART)]
    assert fake.calls == ["training.activity", "dist.ranks", "dist.ranks", "torch.flags"]
    d = walk.departure
    assert d.node == "env.debug-flags" and d.cause.id == "host.debug_mode"
    assert d.measured == {"anomaly_detection": True, "autograd_profiler": False, "sync_debug_on": False,
                          "cuda_launch_blocking": False}
    assert d.summary == "Debug switches on in the training process: anomaly_detection. Every step pays for them."
    assert d.evidence == {"env.debug-flags": {"from": "fake torch.flags"}}


def test_debug_flags_from_outside_anomaly_stacks(walk_with):
    walk, _ = walk_with({"torch.flags.outside": {"anomaly_trace_fraction": 0.02, "anomaly_trace_samples": 3}}, caps=ATTACH)
    assert walk.departure.cause.id == "host.debug_mode"
    assert walk.departure.measured["anomaly_trace_samples"] == 3


# --- edge summaries and robustness ------------------------------------------------------------------

EDGE_SUMMARY = """\
id: edge-summary
title: Edge summary
purpose: An edge that overrides its cause's summary.
start: wait
nodes:
  - id: wait
    question: Does it wait?
    why: Waiting is idle time for the device.
    measure:
      - probe: stacks.sample
        expect:
          data_wait_fraction: {below: 0.1}
    pass: kind
    depart: {cause: input.waiting, summary: "waits {data_wait_fraction:.0%}, io {io_fraction:.0%}, {nothing}"}
  - id: kind
    question: What kind?
    why: The kind decides the fix.
    measure:
      - probe: stacks.sample
        expect:
          producer: {below: 0.5}
    pass: {cause: input.waiting}
    depart: {cause: input.cpu_bound}
"""


def test_edge_summary_overrides_the_cause_summary(tmp_path):
    path = tmp_path / "edge-summary.yaml"
    path.write_text(EDGE_SUMMARY, encoding="utf-8")
    pb = load_playbook(path)
    values = healthy_values()
    values["stacks.sample"].update(data_wait_fraction=0.42, io_fraction=0.07)
    walk = Walk(pb, lambda: set(ATTACH), FakeMeasure(values))
    walk.run()
    assert walk.departure.cause.id == "input.waiting"
    assert walk.departure.summary == "waits 42%, io 7%, n/a"


def test_a_value_of_the_wrong_type_is_an_error_not_a_crash(tmp_path):
    path = tmp_path / "edge-summary.yaml"
    path.write_text(EDGE_SUMMARY, encoding="utf-8")
    pb = load_playbook(path)
    values = healthy_values()  # data_wait_fraction 0.03 passes; then `producer: {below: 0.5}` meets "workers"
    walk = Walk(pb, lambda: set(ATTACH), FakeMeasure(values))
    walk.run()
    assert walk.path[-1].node == "kind" and walk.path[-1].status == ERROR


# --- ProbeRunner ---------------------------------------------------------------------------------------

class CountingProbe(Probe):
    id = "test.unit.counting"
    title = "Counts its runs (unit tests)"
    params = {"k": 1}
    values = {"n": "", "k": ""}
    runs = 0

    def run(self, ctx: ProbeContext, k: int = 1) -> Measurement:
        type(self).runs += 1
        return self.measurement(values={"n": type(self).runs, "k": k}, seconds=0.5, provenance="counter")


class NestedProbe(Probe):
    id = "test.unit.nested"
    title = "Measures the counting probe through the walk's cache (unit tests)"
    values = {"inner_n": "", "inner_reused": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        inner = ctx.measure("test.unit.counting", {})
        return self.measurement(values={"inner_n": inner.values["n"], "inner_reused": inner.reused})


class BrokenProbe(Probe):
    id = "test.unit.broken"
    title = "Raises (unit tests)"
    values = {"n": ""}
    runs = 0

    def run(self, ctx: ProbeContext) -> Measurement:
        type(self).runs += 1
        raise RuntimeError("boom")


class ZeroSecondsProbe(Probe):
    id = "test.unit.zero"
    title = "Reports no duration of its own (unit tests)"
    values = {"n": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        return self.measurement(values={"n": 1})


class FakeTarget:
    kind = "local"
    pid = None
    agent = None

    def __init__(self, alive: bool = True):
        self._alive = alive

    def alive(self) -> bool:
        return self._alive

    def gone_reason(self) -> str:
        return "the target exited (status 1) mid-probe"

    def capabilities(self) -> set[str]:
        return set()


class FakeClock:
    def __init__(self, step: float):
        self.now, self.step = 100.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


UNIT_PROBES = (CountingProbe, NestedProbe, BrokenProbe, ZeroSecondsProbe)


@pytest.fixture
def unit_probes(temp_probes) -> None:
    """The probes above, registered for one test (removed after it, see temp_probes)."""
    for cls in UNIT_PROBES:
        temp_probes(cls)


@pytest.fixture
def runner(unit_probes) -> ProbeRunner:
    CountingProbe.runs = 0
    BrokenProbe.runs = 0
    return ProbeRunner(FakeTarget(), budget=100.0)


def test_same_probe_and_params_runs_once_and_is_reused(runner):
    first = runner.measure_probe("test.unit.counting", {"k": 2})
    second = runner.measure_probe("test.unit.counting", {"k": 2})
    assert CountingProbe.runs == 1
    assert first.values == {"n": 1, "k": 2} and first.reused is False and first.seconds == 0.5
    assert second.values == {"n": 1, "k": 2}
    assert second.reused is True and second.seconds == 0.0
    assert first.reused is False  # the cached measurement itself is not changed


def test_different_params_measure_again(runner):
    runner.measure_probe("test.unit.counting", {"k": 2})
    other = runner.measure_probe("test.unit.counting", {"k": 3})
    assert CountingProbe.runs == 2 and other.reused is False and other.values["k"] == 3


def test_defaults_fill_missing_params(runner):
    m = runner.measure_probe("test.unit.counting", {})
    assert m.values["k"] == 1


def test_call_with_a_measure_option(runner):
    option = MeasureOption(probe="test.unit.counting", params={"k": 5},
                           expect=parse_expectation({"n": {"below": 10}}))
    assert runner(option).values == {"n": 1, "k": 5}
    assert runner(option).reused is True
    assert CountingProbe.runs == 1


def test_forget_one_probe_or_all(runner):
    runner.measure_probe("test.unit.counting", {})
    runner.measure_probe("test.unit.zero", {})
    runner.forget("test.unit.counting")
    assert [k[0] for k in runner.cache] == ["test.unit.zero"]
    assert runner.measure_probe("test.unit.counting", {}).reused is False
    assert CountingProbe.runs == 2
    runner.forget()
    assert runner.cache == {}


def test_nested_measure_goes_through_the_cache(runner):
    runner.measure_probe("test.unit.counting", {})
    outer = runner.measure_probe("test.unit.nested", {})
    assert outer.values == {"inner_n": 1, "inner_reused": True}
    assert CountingProbe.runs == 1


def test_a_probe_that_raises_becomes_a_reading_with_the_reason(runner):
    m = runner.measure_probe("test.unit.broken", {})
    assert not m.ok
    assert m.unavailable == "probe failed: RuntimeError: boom"
    again = runner.measure_probe("test.unit.broken", {})
    assert again.reused is True and BrokenProbe.runs == 1  # a failure is cached too (not cancelled)


def test_failures_are_not_cached_once_cancelled(runner):
    runner.cancelled.set()
    runner.measure_probe("test.unit.broken", {})
    runner.measure_probe("test.unit.broken", {})
    assert BrokenProbe.runs == 2


def test_unknown_probe_and_dead_target(runner):
    assert runner.measure_probe("test.unit.nope", {}).unavailable == "unknown probe test.unit.nope"
    dead = ProbeRunner(FakeTarget(alive=False), budget=100.0)
    m = dead.measure_probe("test.unit.counting", {})
    assert m.unavailable == "the target exited (status 1) mid-probe"
    assert CountingProbe.runs == 0


def test_budget_is_charged_and_enforced(runner):
    runner.budget = 3.0
    runner._time = FakeClock(step=2.0)  # each probe run takes 2 s by this clock
    zero = runner.measure_probe("test.unit.zero", {})
    assert zero.seconds == 2.0  # a probe that reports no duration gets the elapsed time
    assert runner.spent == 2.0
    runner.measure_probe("test.unit.counting", {})
    assert runner.spent == 4.0
    late = runner.measure_probe("test.unit.counting", {"k": 9})
    assert late.unavailable == "the measurement budget (3 s) is spent"
    assert CountingProbe.runs == 1
    # cached results are still served after the budget is spent
    assert runner.measure_probe("test.unit.zero", {}).reused is True


def test_a_nested_measurement_is_charged_once(runner):
    runner._time = FakeClock(step=2.0)  # outer start 102, inner 104..106, outer end 108
    outer = runner.measure_probe("test.unit.nested", {})
    assert outer.values == {"inner_n": 1, "inner_reused": False}
    assert runner.spent == 6.0  # the outer run's 6 s, not 6 + the inner 2
    assert runner.measure_probe("test.unit.counting", {}).reused is True


def _node(probe: str, expect: dict[str, Any]) -> Node:
    return Node(id="t.node", question="q?", why="w", measure=(MeasureOption(probe, {}, parse_expectation(expect)),),
                on_pass=Edge("leaf", "device.compute_bound"), on_depart=Edge("cause", "input.waiting"))


def test_judge_notes_a_reused_measurement(runner):
    node = _node("test.unit.counting", {"n": {"below": 5}})
    first = judge(node, set(), runner)
    second = judge(node, set(), runner)
    assert first.status == PASS and first.note == "" and first.seconds == 0.5
    assert second.status == PASS and second.seconds == 0.0
    assert second.note == "reused the test.unit.counting measurement taken for an earlier node"
    assert second.measurement.reused is True


def test_judge_depart_carries_the_measurement(runner):
    node = _node("test.unit.counting", {"n": {"above": 5}})
    result = judge(node, set(), runner)
    assert result.status == DEPART and result.measured == {"n": 1} and result.expected == "n > 5"
    assert result.to_json() == {"node": "t.node", "status": "depart", "measured": {"n": 1}, "expected": "n > 5",
                                "probe": "test.unit.counting", "seconds": 0.5, "note": ""}


def test_registry_rejects_a_second_class_with_the_same_id(unit_probes):
    class Impostor(Probe):
        id = "test.unit.counting"
        title = "x"

    with pytest.raises(ValueError, match="registered twice"):
        register(Impostor)
    assert registry.get("test.unit.counting") is CountingProbe
    assert register(CountingProbe) is CountingProbe  # re-registering the same class is fine


def test_every_builtin_probe_declares_its_metadata():
    builtin = [pid for pid in registry.ids() if not pid.startswith("test.")]
    assert {"env.versions", "torch.flags", "torch.flags.outside", "loop.steps", "stacks.sample", "process.cpu",
            "torch.ops", "gpu.devices"} <= set(builtin)
    for pid in builtin:
        cls = registry.get(pid)
        assert cls.id == pid and cls.title and cls.values
        assert cls.needs <= {"process", "agent", "gpu", "launch"}


def test_forgetting_a_probe_forgets_what_it_measured_through_the_runner(temp_probes):
    runs: list[str] = []

    @temp_probes
    class Inner(Probe):
        id = "test.forget-inner"
        title = "inner"

        def run(self, ctx):
            runs.append("inner")
            return self.measurement(values={"v": len(runs)})

    @temp_probes
    class Outer(Probe):
        id = "test.forget-outer"
        title = "outer"

        def run(self, ctx):
            runs.append("outer")
            return self.measurement(values={"v": ctx.measure("test.forget-inner", {}).values["v"]})

    class Alive:
        pid = None

        def alive(self):
            return True

    runner = ProbeRunner(Alive(), budget=60)
    runner.measure_probe("test.forget-outer", {})
    runner.forget("test.forget-outer")
    runner.measure_probe("test.forget-outer", {})
    assert runs == ["outer", "inner", "outer", "inner"]  # the inner window was taken afresh too


def test_probes_registered_by_a_test_are_gone_after_it(temp_probes):
    assert registry.get("test.unit.counting") is None  # the unit probes are registered per test
    assert not [pid for pid in registry.ids() if pid.startswith("test.")]


def test_tests_that_register_probes_pass_twice_in_one_process():
    """A second in-process run (pytest.main twice) registers new classes under the same ids."""
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__)
    tests = [f"{here}::test_forgetting_a_probe_forgets_what_it_measured_through_the_runner",
             f"{here}::test_same_probe_and_params_runs_once_and_is_reused"]
    code = ("import sys, pytest\n"
            f"args = ['-q', '-p', 'no:cacheprovider', *{tests!r}]\n"
            "sys.exit(max(int(pytest.main(args)), int(pytest.main(args))))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=here.parents[2])
    assert done.returncode == 0, done.stdout[-3000:]


class PeekingMeasure(FakeMeasure):
    """A fake whose windows listed under `ready` were already measured (prefetched)."""

    def __init__(self, values: dict[str, Any], ready: set[str]):
        super().__init__(values)
        self.ready = ready

    def peek(self, option: Any) -> Measurement | None:
        if option.probe not in self.ready:
            return None
        return Measurement(probe=option.probe, values=dict(self.values[option.probe]), provenance="constructed")


def test_a_later_reading_that_disagrees_is_said_in_the_note_and_the_first_decides(slow_training):
    values = healthy_values()
    values["stacks.sample"] = {**values["stacks.sample"], "data_wait_fraction": 0.45}
    fake = PeekingMeasure(values, ready={"stacks.sample"})
    result = Walk(slow_training, lambda: set(LAUNCH), fake).run_node("input.data-wait")
    assert result.status == PASS and result.probe == "loop.steps"
    assert "cross-check: stacks.sample read data_wait_fraction 0.45 against 0.02" in result.note
    assert fake.calls == ["loop.steps"]  # the cross-check measures nothing
    agreeing = PeekingMeasure(healthy_values(), ready={"stacks.sample"})
    assert "cross-check" not in Walk(slow_training, lambda: set(LAUNCH), agreeing).run_node("input.data-wait").note
