"""The engine's rules on a small playbook of its own: what pass, depart, stop, error, skip and a
reading too close to call do to a walk. Adding a node to a shipped playbook touches none of this."""

from __future__ import annotations

from pathlib import Path

import pytest

from fieldguide.measurement import Measurement
from fieldguide.playbook import load_playbook
from fieldguide.playbook.schema import Playbook
from fieldguide.walk.engine import CLEAN, DEPART, DEPARTURE, ERROR, INCONCLUSIVE, PASS, SKIP, Walk
from tests.unit.fg_fakes import FakeMeasure

RULES = """\
id: rules
title: The engine's rules
purpose: Three nodes over one probe, each edge kind once.
start: waits
leaves:
  all.fine: Nothing departed.
nodes:
  - id: waits
    question: Does it wait for input?
    why: A wait is idle time.
    measure:
      - probe: stacks.sample
        expect:
          data_wait_fraction: {below: 0.1}
    pass: writes
    depart: {cause: input.waiting, summary: "waits {data_wait_fraction:.0%} of a step"}
  - id: writes
    question: Does it write files in the step?
    why: A write blocks the step.
    measure:
      - probe: stacks.sample
        expect:
          io_fraction: {below: 0.1}
    pass: sleeps
    depart: {stop: "writes {io_fraction:.0%} of the time: out of this playbook"}
    error: {stop: "could not tell whether it writes"}
  - id: sleeps
    question: Does it sleep?
    why: A sleep is idle time.
    measure:
      - probe: stacks.sample
        expect:
          sleep_fraction: {below: 0.5}
    pass: {leaf: all.fine}
    depart: {cause: host.blocking_io}
"""

QUIET = {"data_wait_fraction": 0.02, "io_fraction": 0.01, "sleep_fraction": 0.0}


@pytest.fixture
def rules(tmp_path: Path) -> Playbook:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES, encoding="utf-8")
    return load_playbook(path)


def walked(playbook: Playbook, *readings: dict | Measurement) -> tuple[Walk, list[str]]:
    """A walk whose probe answers each reading in turn (the last one again after that)."""
    answers = list(readings)
    asked: list[str] = []

    def measure(option):  # type: ignore[no-untyped-def]
        asked.append(option.probe)
        reading = answers.pop(0) if len(answers) > 1 else answers[0]
        return FakeMeasure({option.probe: reading})(option)

    walk = Walk(playbook, lambda: {"process", "agent"}, measure)
    walk.run()
    return walk, asked


def statuses(walk: Walk) -> list[tuple[str, str]]:
    return [(r.node, r.status) for r in walk.path]


def test_every_pass_reaches_the_leaf_and_the_walk_is_clean(rules: Playbook) -> None:
    walk, asked = walked(rules, QUIET)
    assert statuses(walk) == [("waits", PASS), ("writes", PASS), ("sleeps", PASS)]
    assert (walk.verdict, walk.conclusion) == (CLEAN, "all.fine")
    assert len(asked) == 3  # one reading per node: nothing reused here, the fake is asked each time


def test_a_depart_to_a_cause_ends_the_walk_with_its_summary(rules: Playbook) -> None:
    walk, _ = walked(rules, {**QUIET, "data_wait_fraction": 0.42})
    assert statuses(walk) == [("waits", DEPART)]
    assert walk.verdict == DEPARTURE and walk.departure is not None
    assert (walk.departure.cause.id, walk.departure.summary) == ("input.waiting", "waits 42% of a step")


def test_a_depart_to_a_stop_ends_inconclusive_quoting_the_reading(rules: Playbook) -> None:
    walk, _ = walked(rules, {**QUIET, "io_fraction": 0.3})
    assert statuses(walk) == [("waits", PASS), ("writes", DEPART)]
    assert walk.verdict == INCONCLUSIVE and walk.departure is None and walk.conclusion is None
    assert walk.caveat == "writes 30% of the time: out of this playbook"


def test_a_node_that_cannot_measure_follows_its_error_edge_with_the_reason(rules: Playbook) -> None:
    walk, _ = walked(rules, QUIET, Measurement.cannot("stacks.sample", "ptrace not permitted"))
    assert statuses(walk) == [("waits", PASS), ("writes", ERROR)]
    assert walk.verdict == INCONCLUSIVE
    assert walk.caveat == "could not tell whether it writes: stacks.sample: ptrace not permitted"


def test_a_node_with_no_error_edge_goes_on_and_the_walk_is_not_clean(rules: Playbook) -> None:
    walk, _ = walked(rules, QUIET, QUIET, Measurement.cannot("stacks.sample", "no samples"))
    assert statuses(walk) == [("waits", PASS), ("writes", PASS), ("sleeps", ERROR)]
    assert walk.verdict == INCONCLUSIVE  # a leaf reached past a node that could not measure rules nothing out


def test_a_reading_within_its_margin_is_measured_again_then_left_undecided(rules: Playbook) -> None:
    close = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.11},
                        margins={"data_wait_fraction": 0.05})
    walk, asked = walked(rules, close)
    first = walk.path[0]
    assert first.node == "waits" and first.status == SKIP and first.undecided
    assert "too close to call" in first.note and len(asked) >= 2  # a longer window before it gave up
    assert walk.verdict == INCONCLUSIVE and walk.departure is None


def test_a_reading_the_second_window_decides_is_judged(rules: Playbook) -> None:
    close = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.11},
                        margins={"data_wait_fraction": 0.05})
    clear = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.4},
                        margins={"data_wait_fraction": 0.02})
    walk, _ = walked(rules, close, clear)
    assert statuses(walk)[0] == ("waits", DEPART)
    assert "measured again" in walk.path[0].note
    assert walk.departure is not None and walk.departure.cause.id == "input.waiting"


def test_a_close_reading_of_a_pooling_probe_is_extended_window_by_window_until_it_clears(rules: Playbook) -> None:
    """stacks.sample pools: each extension is one more window of its own length added to the
    samples before it (asked as pooled=1, 2, ...), not a fresh window twice as long."""
    close = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.11},
                        margins={"data_wait_fraction": 0.05})
    clear = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.13},
                        margins={"data_wait_fraction": 0.02})
    params: list[dict] = []
    answers = [close, close, clear]

    def measure(option):  # type: ignore[no-untyped-def]
        params.append(dict(option.params))
        return FakeMeasure({option.probe: answers.pop(0) if answers else QUIET})(option)

    walk = Walk(rules, lambda: {"process", "agent"}, measure)
    walk.run()
    assert params[:3] == [{}, {"pooled": 1}, {"pooled": 2}]
    assert statuses(walk)[0] == ("waits", DEPART)
    assert "measured again, 3 windows pooled" in walk.path[0].note


def test_a_pooling_probe_gives_up_after_four_windows_in_all(rules: Playbook) -> None:
    close = Measurement(probe="stacks.sample", values={**QUIET, "data_wait_fraction": 0.11},
                        margins={"data_wait_fraction": 0.05})
    params: list[dict] = []

    def measure(option):  # type: ignore[no-untyped-def]
        params.append(dict(option.params))
        return FakeMeasure({option.probe: close})(option)

    walk = Walk(rules, lambda: {"process", "agent"}, measure)
    walk.run()
    assert params[:5] == [{}, {"pooled": 1}, {"pooled": 2}, {"pooled": 3}, {}]  # then the next node
    assert walk.path[0].undecided and "too close to call" in walk.path[0].note
