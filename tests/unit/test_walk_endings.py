"""The walk's verdict over departures that lead on, and over targets that end mid-walk."""

from __future__ import annotations

from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.playbook import parse_expectation
from fieldguide.playbook.schema import Cause, Edge, MeasureOption, Node, Playbook
from fieldguide.walk.engine import CLEAN, DEPART, INCONCLUSIVE, PASS, SKIP, Walk
from fieldguide.walk.runner import ProbeRunner

CAUSE = Cause(id="input.waiting", title="waits", summary="{x}", why="why", fix=("fix",), verify="verify")


def node(node_id: str, probe: str, expect: dict[str, Any], on_pass: Edge, on_depart: Edge) -> Node:
    option = MeasureOption(probe=probe, params={}, expect=parse_expectation(expect, node_id))
    return Node(id=node_id, question="?", why="why", measure=(option,), on_pass=on_pass, on_depart=on_depart)


def playbook(*nodes: Node) -> Playbook:
    return Playbook(id="t", title="t", purpose="t", start=nodes[0].id, nodes={n.id: n for n in nodes},
                    causes={"input.waiting": CAUSE}, leaves={"healthy": "all fine"})


def measure_with(values: dict[str, dict[str, Any] | Measurement]) -> Any:
    def measure(option: MeasureOption) -> Measurement:
        spec = values[option.probe]
        return spec if isinstance(spec, Measurement) else Measurement(probe=option.probe, values=dict(spec))
    return measure


def test_a_departure_followed_by_a_pass_to_a_leaf_is_not_clean() -> None:
    # The review's repro: A departs, its depart edge leads to B, B passes to a healthy leaf.
    book = playbook(
        node("a", "loop.steps", {"x": {"below": 0.1}}, Edge("leaf", "healthy"), Edge("node", "b")),
        node("b", "stacks.sample", {"y": {"below": 0.5}}, Edge("leaf", "healthy"), Edge("cause", "input.waiting")))
    walk = Walk(book, lambda: {"process", "agent"}, measure_with({"loop.steps": {"x": 0.9},
                                                                  "stacks.sample": {"y": 0.1}}))
    walk.run()
    assert [r.status for r in walk.path] == [DEPART, PASS]
    assert walk.verdict == INCONCLUSIVE
    assert "a departed from its expectation" in walk.caveat


def test_a_target_that_ended_skips_what_it_cannot_judge_and_keeps_what_it_measured() -> None:
    book = playbook(
        node("a", "loop.steps", {"x": {"below": 0.1}}, Edge("node", "b"), Edge("cause", "input.waiting")),
        node("b", "stacks.sample", {"y": {"below": 0.5}}, Edge("leaf", "healthy"), Edge("cause", "input.waiting")))
    ended = Measurement.cannot("stacks.sample", "the target exited with status 1 (ValueError: x)", applicable=False)
    walk = Walk(book, lambda: {"process", "agent"}, measure_with({"loop.steps": {"x": 0.02},
                                                                  "stacks.sample": ended}))
    walk.run()
    assert [r.status for r in walk.path] == [PASS, SKIP]
    assert "ValueError" in walk.path[1].note
    assert walk.verdict == CLEAN and "not measured on this target: b" in walk.caveat


def test_a_failure_to_measure_is_still_an_error() -> None:
    book = playbook(
        node("a", "loop.steps", {"x": {"below": 0.1}}, Edge("leaf", "healthy"), Edge("cause", "input.waiting")))
    walk = Walk(book, lambda: {"process", "agent"},
                measure_with({"loop.steps": Measurement.cannot("loop.steps", "py-spy failed")}))
    walk.run()
    assert walk.path[0].status == "error" and walk.verdict == INCONCLUSIVE


class EndedTarget:
    kind = "launch"
    pid = 1
    agent = None

    def alive(self) -> bool:
        return False

    def gone_reason(self) -> str:
        return "the target exited with status 1 (ValueError: bad batch)"


def test_the_runner_runs_only_history_readers_on_an_ended_target() -> None:
    runner = ProbeRunner(EndedTarget(), budget=10.0)
    stacks = runner.measure_probe("stacks.sample", {})
    assert not stacks.ok and not stacks.applicable and "ValueError: bad batch" in (stacks.unavailable or "")
    loop = runner.measure_probe("loop.steps", {})  # reads history: it runs, and says the agent is absent
    assert not loop.ok and loop.unavailable == "the in-process agent is not connected"


class Alive:
    kind = "launch"
    pid = 1
    agent = None

    def alive(self) -> bool:
        return True

    def gone_reason(self) -> str:
        return "gone"

    def capabilities(self) -> set[str]:
        return {"process"}


def test_a_prefetched_window_runs_beside_the_walk_and_its_node_waits_only_for_the_rest(temp_probes: Any) -> None:
    import threading

    from fieldguide.probes.base import Probe, ProbeContext

    release = threading.Event()
    runs: list[int] = []

    class Window(Probe):
        id = "test.walk.window"
        title = "a window the walk prefetches"
        params = {"seconds": 1.0}
        values = {"n": ""}

        def run(self, ctx: ProbeContext, seconds: float = 1.0) -> Measurement:
            runs.append(1)
            release.wait(5)
            return self.measurement(values={"n": len(runs)}, seconds=seconds)

    temp_probes(Window)
    runner = ProbeRunner(Alive(), budget=100.0)
    option = MeasureOption(probe="test.walk.window", params={}, expect=parse_expectation({"n": {"below": 5}}))
    runner.prefetch((option,), {"process"})
    runner.prefetch((option,), {"process"})  # already in flight: not started twice
    threading.Timer(0.3, release.set).start()
    first = runner(option)  # waits for the window in flight
    assert first.ok and first.values == {"n": 1} and not first.reused
    assert runs == [1]
    assert 0.1 < runner.spent < 3.0  # charged for the wait, not for a second window
    again = runner(option)
    assert again.reused and runs == [1]
    runner.stop_prefetch()


def test_prefetch_skips_probes_whose_needs_are_unmet(temp_probes: Any) -> None:
    runner = ProbeRunner(Alive(), budget=100.0)
    option = MeasureOption(probe="loop.steps", params={}, expect=parse_expectation({"steps": {"at_least": 1}}))
    runner.prefetch((option,), {"process"})  # loop.steps needs the agent
    assert not runner._inflight and not runner._prefetch_threads


def test_prefetch_must_name_a_probe_the_playbook_measures(tmp_path: Any) -> None:
    import shutil
    from pathlib import Path

    import pytest

    from fieldguide.playbook import load_playbook
    from fieldguide.playbook.loader import PlaybookError

    root = Path(__file__).resolve().parents[2] / "playbooks"
    shutil.copy(root / "causes.yaml", tmp_path / "causes.yaml")
    text = (root / "slow-training.yaml").read_text()
    assert "prefetch: [stacks.sample, dist.ranks]" in text
    assert load_playbook(root / "slow-training.yaml").prefetch[0].probe == "stacks.sample"
    (tmp_path / "bad.yaml").write_text(text.replace("prefetch: [stacks.sample, dist.ranks]",
                                                    "prefetch: [stacks.sample, gpu.devices]"))
    with pytest.raises(PlaybookError, match="prefetch.*measured by no node"):
        load_playbook(tmp_path / "bad.yaml")


def test_a_probe_measuring_a_prefetched_window_through_the_runner_does_not_deadlock(temp_probes: Any) -> None:
    # The outer probe runs under the runner's lock and waits for the window's thread, which
    # must not need that lock to finish (the attach walk's first node hung on exactly this).
    import threading

    from fieldguide.probes.base import Probe, ProbeContext

    class SlowWindow(Probe):
        id = "test.walk.slowwindow"
        title = "a prefetched window"
        values = {"n": ""}

        def run(self, ctx: ProbeContext) -> Measurement:
            ctx.cancelled.wait(0.3)
            return self.measurement(values={"n": 1})

    class Outer(Probe):
        id = "test.walk.outer"
        title = "measures the window through the runner"
        values = {"inner": ""}

        def run(self, ctx: ProbeContext) -> Measurement:
            assert ctx.measure is not None
            return self.measurement(values={"inner": ctx.measure("test.walk.slowwindow", {}).values.get("n")})

    temp_probes(SlowWindow)
    temp_probes(Outer)
    runner = ProbeRunner(Alive(), budget=100.0)
    window = MeasureOption(probe="test.walk.slowwindow", params={}, expect=parse_expectation({"n": {"below": 5}}))
    runner.prefetch((window,), {"process"})
    result: list[Measurement] = []
    worker = threading.Thread(target=lambda: result.append(runner.measure_probe("test.walk.outer", {})), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "deadlocked"
    assert result[0].values == {"inner": 1}


def test_a_depart_edge_that_stops_ends_inconclusive_with_its_reason() -> None:
    book = playbook(
        node("a", "loop.steps", {"x": {"equals": True}}, Edge("leaf", "healthy"),
             Edge("stop", "the job compiles nothing: nothing for this playbook")))
    walk = Walk(book, lambda: {"process", "agent"}, measure_with({"loop.steps": {"x": False}}))
    walk.run()
    assert [r.status for r in walk.path] == [DEPART]
    assert walk.verdict == INCONCLUSIVE and walk.departure is None and walk.conclusion is None
    assert walk.caveat == "the job compiles nothing: nothing for this playbook"


def test_low_gpu_util_on_a_machine_without_a_gpu_skips_the_gpu_nodes_and_the_host_decides() -> None:
    from fg_fakes import FakeMeasure, healthy_values

    from fieldguide.playbook import find_playbook

    values: dict[str, Any] = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "data_wait_fraction": 0.6, "producer_cpu_fraction": 0.05,
                            "producer": "workers"}
    values["process.cpu"] = {**values["process.cpu"], "worker_cpu_cores": 0.1, "worker_cores_mean": 0.05}
    walk = Walk(find_playbook("low-gpu-util"), lambda: {"process", "agent"}, FakeMeasure(values))
    walk.run()
    statuses = {r.node: r.status for r in walk.path}
    # The input share departs and is named; the walk goes on over the step's other shares, whose
    # GPU nodes skip here too.
    skipped = [n for n, s in statuses.items() if s == SKIP]
    assert skipped[:4] == ["device.shared", "device.used", "device.throttled", "input.copy-in-wait"]
    assert "input.h2d-copy" in skipped
    assert all("needs an NVIDIA GPU" in r.note for r in walk.path if r.status == SKIP)
    assert walk.departure is not None and walk.departure.cause.id == "input.waiting"


def test_a_wait_before_the_forward_that_is_a_pageable_copy_is_named_a_copy_not_cpu_bound_input() -> None:
    """On an H200, a 32 MB pageable batch copied to the device before each forward was most of
    the step: the wait departs, and the copy, not the (busy) producing thread, is the cause."""
    from fg_fakes import FakeMeasure, healthy_values

    from fieldguide.playbook import find_playbook

    values: dict[str, Any] = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "data_wait_fraction": 0.6, "producer_cpu_fraction": 0.9}
    values["gpu.window"] = {"others_sm_util": 0.0, "job_on_gpu": True, "throttled_fraction": 0.0}
    values["cuda.profile"] = {"h2d_pageable_fraction": 0.7, "h2d_pageable_per_step": 1.0}
    walk = Walk(find_playbook("low-gpu-util"), lambda: {"process", "agent", "gpu"}, FakeMeasure(values))
    walk.run()
    path = [(r.node, r.status) for r in walk.path]
    at = path.index(("input.data-wait", DEPART))
    assert path[at:at + 2] == [("input.data-wait", DEPART), ("input.copy-in-wait", DEPART)]
    assert walk.departure is not None and walk.departure.cause.id == "input.h2d_copy"
    assert walk.departure.measured == {"data_wait_fraction": 0.6, "h2d_pageable_fraction": 0.7}
    values["cuda.profile"] = {"h2d_pageable_fraction": 0.01, "h2d_pageable_per_step": 1.0}
    walk = Walk(find_playbook("low-gpu-util"), lambda: {"process", "agent", "gpu"}, FakeMeasure(values))
    walk.run()
    assert walk.departure is not None and walk.departure.cause.id == "input.cpu_bound"


def test_peek_gives_a_finished_prefetch_or_a_cached_reading_and_never_waits(temp_probes: Any) -> None:
    import threading

    from fieldguide.probes.base import Probe, ProbeContext

    release = threading.Event()

    class HeldWindow(Probe):
        id = "test.walk.heldwindow"
        title = "a window that ends when the test says"
        values = {"n": ""}

        def run(self, ctx: ProbeContext) -> Measurement:
            release.wait(5)
            return self.measurement(values={"n": 2})

    temp_probes(HeldWindow)
    runner = ProbeRunner(Alive(), budget=100.0)
    window = MeasureOption(probe="test.walk.heldwindow", params={}, expect=parse_expectation({"n": {"below": 5}}))
    assert runner.peek(window) is None  # never measured
    runner.prefetch((window,), {"process"})
    assert runner.peek(window) is None  # still running: no waiting for it
    release.set()
    runner.stop_prefetch()
    assert runner.peek(window).values == {"n": 2}
    assert runner(window).values == {"n": 2} and runner.peek(window).values == {"n": 2}
