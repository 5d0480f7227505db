"""The cold start taken apart, on constructed marks: phases, shares, steady state, the playbook."""

from __future__ import annotations

import pytest

from fieldguide.analysis.coldstart import SHARE_TITLES, steady_step, take_apart
from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.walk.engine import Walk


def steps(first: float, durations: list[float], start_at: int = 1) -> list[dict]:
    marks, t = [], first
    for n, d in enumerate([0.0, *durations], start=start_at):
        t += d
        marks.append({"step": n, "t": t})
    return marks


def job(**spans: tuple[float, float]) -> list[dict]:
    """A job spawned at 100.0: interpreter at 100.1, torch at 101.0, params at 101.5, first forward
    at 104.0, first step at 104.2, then 40 steps of 0.1 s after 3 slow ones."""
    marks = [{"mark": "interpreter", "t": 100.1}, {"mark": "torch_import", "t": 101.0},
             {"mark": "first_param", "t": 101.5}, {"mark": "first_forward", "t": 104.0},
             {"mark": "first_step", "t": 104.2}]
    marks += [{"span": name, "t_start": a, "t_end": b} for name, (a, b) in spans.items()]
    return marks + steps(104.2, [1.0, 0.6, 0.4] + [0.1] * 40)


def test_steady_is_the_first_window_whose_median_settles_with_no_outlier():
    marks = steps(0.0, [1.0, 0.6, 0.4] + [0.1] * 30)
    assert steady_step([(m["step"], m["t"]) for m in marks]) == 5
    # A 10 s load between two quick steps is no steady step, though the window's median is.
    marks = steps(0.0, [0.1, 10.0] + [0.1] * 30)
    assert steady_step([(m["step"], m["t"]) for m in marks]) == 4
    # Bursty loaders alternate: the window's median decides, not each step.
    marks = steps(0.0, [0.05, 0.15] * 20)
    assert steady_step([(m["step"], m["t"]) for m in marks]) == 2
    assert steady_step([(m["step"], m["t"]) for m in steps(0.0, [0.1] * 10)]) is None  # too few yet


def test_phases_are_consecutive_and_add_up_to_the_time_to_steady():
    cold = take_apart(100.0, job(), [], now=200.0)
    assert cold is not None and cold["steady"] and cold["steady_step"] == 5
    assert [p["phase"] for p in cold["phases"]] == ["interpreter", "torch_import", "first_param", "first_forward",
                                                    "first_step", "steady"]
    # Steady from the start of step 5: the end of step 4 = 104.2 + 1.0 + 0.6 + 0.4.
    assert cold["total_s"] == pytest.approx(6.2)
    assert sum(p["seconds"] for p in cold["phases"]) == pytest.approx(cold["total_s"], abs=0.005)
    for before, after in zip(cold["phases"], cold["phases"][1:], strict=False):
        assert after["start_s"] == pytest.approx(before["start_s"] + before["seconds"], abs=0.002)
    assert set(cold["shares"]) == set(SHARE_TITLES)
    assert sum(cold["shares"].values()) == pytest.approx(cold["total_s"], abs=0.005)
    assert cold["shares"]["imports"] == pytest.approx(1.0)
    assert cold["shares"]["data_setup"] == pytest.approx(3.0)
    assert cold["shares"]["warmup"] == pytest.approx(2.2)


def test_timed_spans_claim_their_seconds_once_and_the_rest_goes_to_the_stretch():
    compiles = [{"t_start": 104.3, "t_end": 105.0}, {"t_start": 104.8, "t_end": 105.3}]  # overlapping
    cold = take_apart(100.0, job(checkpoint=(102.0, 103.5), cuda_init=(101.2, 101.4), model_build=(101.5, 101.9)),
                      compiles, now=200.0)
    assert cold is not None
    shares = cold["shares"]
    assert shares["compile"] == pytest.approx(1.0)  # the union, not 1.2
    assert shares["checkpoint"] == pytest.approx(1.5)
    assert shares["device_init"] == pytest.approx(0.2)
    assert shares["model_build"] == pytest.approx(0.4)
    assert shares["data_setup"] == pytest.approx(3.0 - 1.5 - 0.2 - 0.4)
    assert shares["warmup"] == pytest.approx(2.2 - 1.0)
    assert sum(shares.values()) == pytest.approx(cold["total_s"], abs=0.005)
    assert "cuda_init" in [p["phase"] for p in cold["phases"]]  # its end is a milestone on the timeline


def test_an_untimed_share_is_named_for_the_line_the_main_thread_was_at_in_it():
    """The seconds before the model in a job that builds no dataset: named for its own line, not
    called "the dataset and the loader". Samples inside a timed span (a checkpoint) are not its."""
    where = [[101.0 + i * 0.1, "read_config (train.py:12)"] for i in range(1, 8)]
    where += [[102.0 + i * 0.1, "load (train.py:30)"] for i in range(2, 14)]  # inside torch.load: timed
    where += [[103.6, "main (train.py:50)"], [103.7, "read_config (train.py:12)"], [100.5, "<module> (train.py:2)"]]
    cold = take_apart(100.0, job(checkpoint=(102.0, 103.5)) + [{"where": where}], [], now=200.0)
    assert cold is not None
    assert cold["where"]["data_setup"] == "read_config (train.py:12), 89% of 9 samples"
    assert "imports" not in cold["where"]  # one sample says nothing


def test_a_job_still_starting_is_taken_apart_up_to_now():
    marks = [{"mark": "interpreter", "t": 100.1}, {"mark": "torch_import", "t": 101.0}]
    cold = take_apart(100.0, marks, [], now=160.0)
    assert cold is not None and not cold["steady"] and cold["steady_step"] is None
    assert cold["total_s"] == pytest.approx(60.0)
    assert cold["phases"][-1]["phase"] == "now"
    assert cold["shares"]["data_setup"] == pytest.approx(59.0)  # torch is in, no batch yet
    assert take_apart(100.0, [], [], now=160.0) is None  # no agent, no marks: nothing is made up


def phases_measurement(**shares: float) -> Measurement:
    total = sum(shares.values())
    values = {"seconds_to_steady": total, "steady": True, "dominant": max(shares, key=lambda k: shares[k])}
    for name in SHARE_TITLES:
        values[f"{name}_s"] = shares.get(name, 0.0)
        values[f"{name}_fraction"] = shares.get(name, 0.0) / total
    return Measurement(probe="start.phases", values=values)


@pytest.mark.parametrize(("shares", "cause"), [
    ({"imports": 2.0, "checkpoint": 12.0, "warmup": 1.0}, "start.checkpoint_load"),
    ({"imports": 2.0, "data_setup": 15.0, "warmup": 1.0}, "start.data_setup"),
    ({"imports": 20.0, "data_setup": 5.0}, "start.imports"),
    ({"imports": 2.0, "device_init": 30.0}, "start.device_init"),
    ({"imports": 2.0, "model_build": 30.0}, "start.model_init"),
    ({"imports": 2.0, "warmup": 30.0}, "start.warmup"),
])
def test_the_slow_start_walk_departs_on_the_share_that_dominates(shares, cause):
    playbook = find_playbook("slow-start")
    walk = Walk(playbook, lambda: {"process", "agent", "launch"}, lambda option: phases_measurement(**shares))
    walk.run()
    assert walk.departure is not None
    assert walk.departure.cause.id == cause


def test_a_quick_start_is_clean_and_a_spread_one_says_no_part_dominates():
    playbook = find_playbook("slow-start")
    quick = Walk(playbook, lambda: {"process", "agent", "launch"},
                 lambda option: phases_measurement(imports=1.5, data_setup=1.0, warmup=0.5))
    quick.run()
    assert quick.conclusion == "start.quick"
    spread = {name: 4.0 for name in SHARE_TITLES}
    walk = Walk(playbook, lambda: {"process", "agent", "launch"}, lambda option: phases_measurement(**spread))
    walk.run()
    assert walk.departure is None and walk.conclusion is None and walk.verdict == "inconclusive"
    assert "no single part of the start dominates" in walk.caveat


def test_the_first_step_ends_at_the_first_boundary_of_the_kind_that_defines_steps():
    from types import SimpleNamespace

    from fieldguide.analysis.coldstart import from_connection

    streams = {("coldstart", "marks"): job(), ("compiled", "compiles"): [],
               # backward() counted first, then the optimizer's step (at 104.5) defined steps
               ("loop", "signals"): [{"boundary": "k", "t": 104.2}, {"boundary": "o", "t": 104.5}]}
    conn = SimpleNamespace(stream=lambda cap, name: SimpleNamespace(items=streams.get((cap, name), [])),
                           closed=False, closed_at=None)
    cold = from_connection(100.0, conn, now=200.0)
    assert cold is not None
    first = next(p for p in cold["phases"] if p["phase"] == "first_step")
    assert first["start_s"] + first["seconds"] == pytest.approx(4.5)


def test_the_cold_start_of_a_connection_counts_the_compile_capabilitys_spans() -> None:
    """The agent's compile capability streams its compiles as `compile`/`compiles` (a name once
    misspelt here, so a cold compile never showed in the start)."""
    from types import SimpleNamespace

    from fieldguide.agent.channel import Stream
    from fieldguide.analysis.coldstart import from_connection

    streams: dict[tuple[str, str], Stream] = {}

    def stream(capability: str, name: str) -> Stream:
        return streams.setdefault((capability, name), Stream())

    stream("coldstart", "marks").items.extend(job())
    stream("compile", "compiles").items.append({"id": "0/0", "t_start": 104.3, "t_end": 105.0})
    conn = SimpleNamespace(stream=stream, closed=False, closed_at=None)
    cold = from_connection(100.0, conn, now=200.0)
    assert cold is not None and cold["shares"]["compile"] == pytest.approx(0.7)


def test_the_seconds_spent_compiling_while_a_walk_waits_are_the_union_of_the_spans() -> None:
    from fieldguide.analysis.coldstart import compile_spans, covered_seconds

    def compiling_seconds(compiles: list[dict], start: float, end: float) -> float:
        return covered_seconds(compile_spans(compiles), start, end)

    compiles = [{"t_start": 10.0, "t_end": 40.0}, {"t_start": 20.0, "t_end": 30.0},  # nested: once
                {"t_start": 50.0, "t_end": 80.0}, {"t_start": 95.0, "t_end": None}]
    assert compiling_seconds(compiles, 0.0, 70.0) == pytest.approx(30.0 + 20.0)
    assert compiling_seconds([], 0.0, 70.0) == 0.0
