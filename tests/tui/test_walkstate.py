"""WalkState: which probe operation runs, which waits, and whether the walk advances by itself.
Plain state, driven here without Textual."""

from __future__ import annotations

import pytest

from fieldguide.frontends.tui.walkstate import (
    ADVANCE,
    OPEN,
    QUEUE,
    REPLACE,
    START,
    WALK,
    Request,
    WalkState,
)
from fieldguide.walk.engine import NodeResult


def result(node: str, status: str = "pass") -> NodeResult:
    return NodeResult(node=node, status=status)


def test_opening_then_the_walk_advances_by_itself_unless_paused() -> None:
    state = WalkState(auto=True)
    assert state.op == OPEN
    assert not state.can_advance(ready=True, finished=False, closing=False)  # still opening
    assert state.opened() is True and state.op is None
    assert state.can_advance(ready=True, finished=False, closing=False)
    assert not state.can_advance(ready=True, finished=True, closing=False)
    assert not state.can_advance(ready=True, finished=False, closing=True)
    assert not state.can_advance(ready=False, finished=False, closing=False)
    state.start_step()
    assert state.op == WALK and not state.can_advance(ready=True, finished=False, closing=False)
    assert state.done(closing=False) == ADVANCE and state.op is None
    assert WalkState(auto=False).opened() is False


def test_n_steps_by_hand_and_pauses_auto_walk() -> None:
    state = WalkState(auto=True)
    assert state.step_key(ready=False, finished=False) == "starting"
    state.opened()
    assert state.step_key(ready=True, finished=True) == "over"
    assert state.step_key(ready=True, finished=False) == "step"
    assert state.op == WALK and state.auto is False
    assert state.step_key(ready=True, finished=False) == "busy"
    assert state.done(closing=False) is None  # paused: the walk waits for the next n


def test_a_request_while_idle_starts_now_and_pauses_auto_walk() -> None:
    state = WalkState(auto=True)
    state.opened()
    outcome, paused = state.request(Request("rerun", "a", fresh=True), finished=False)
    assert (outcome, paused, state.op) == (START, True, "rerun")
    assert state.auto is False
    outcome, paused = WalkState(auto=True, op=None).request(Request("jump", "a"), finished=True)
    assert (outcome, paused) == (START, False)  # a finished walk has no auto-walk to pause


def test_a_request_during_a_step_is_queued_and_begins_when_the_step_ends() -> None:
    state = WalkState(auto=True)
    state.opened()
    state.start_step()
    jump = Request("jump", "b")
    assert state.request(jump, finished=False) == (QUEUE, True)
    assert state.pending == jump and state.op == WALK
    assert state.done(closing=False) == jump
    assert state.op == "jump" and state.pending is None


def test_a_request_during_a_rerun_replaces_it_latest_wins() -> None:
    state = WalkState(auto=False, op=None)
    state.request(Request("rerun", "a", fresh=True), finished=True)
    assert state.request(Request("jump", "b"), finished=True)[0] == REPLACE
    last = Request("jump", "c")
    assert state.request(last, finished=True)[0] == REPLACE
    assert state.done(closing=False) == last  # only the latest waits


def test_nothing_begins_after_an_operation_once_the_app_is_closing() -> None:
    state = WalkState(auto=True, op=WALK)
    state.pending = Request("rerun", "a", fresh=True)
    assert state.done(closing=True) is None and state.op is None


def test_a_cancelled_rerun_leaves_the_node_as_it_was_a_walk_step_is_on_the_record() -> None:
    state = WalkState(op=None)
    assert state.node_started("a", "rerun", "depart") is True and state.measuring == "a"
    assert state.node_finished(result("a", "error"), "rerun", cancelled=True) == "depart"
    assert "a" not in state.results and state.measuring is None
    state.node_started("a", "rerun", "depart")
    assert state.node_finished(result("a", "pass"), "rerun", cancelled=False) == "pass"
    assert state.reruns == {"a"} and state.results["a"].status == "pass"
    state.node_started("a", WALK, "pass")
    assert state.node_finished(result("a", "skip"), WALK, cancelled=True) == "skip"  # a step is kept
    assert state.reruns == set()


def test_the_remeasure_is_followed_for_the_departure_screen() -> None:
    state = WalkState(auto=False, op=None)
    assert state.request(Request("remeasure"), finished=True)[0] == START
    assert state.remeasure.running and state.remeasure.text == "starting" and state.remeasure.rows is None
    assert state.node_started("input.data-wait", "remeasure", "depart") is False  # no line of its own
    assert state.measuring is None and state.remeasure.text == "measuring input.data-wait"
    state.remeasure_status("starting the job afresh")
    assert state.remeasure.text == "starting the job afresh"
    rows = [("input.data-wait", None, result("input.data-wait", "depart"))]
    state.remeasure_done(rows, "the command was started afresh")
    assert not state.remeasure.running and state.remeasure.rows == rows
    assert state.remeasure.note == "the command was started afresh"


def test_enter_on_the_walks_own_next_node_is_a_step() -> None:
    state = WalkState(op=None)
    assert state.enter_is_step("a", current="a", finished=False)
    assert not state.enter_is_step("b", current="a", finished=False)
    assert not state.enter_is_step("a", current="a", finished=True)
    state.start_step()
    assert not state.enter_is_step("a", current="a", finished=False)


def test_toggle_and_failure_stop_auto_walk() -> None:
    state = WalkState(auto=False)
    assert state.toggle_auto() is True and state.toggle_auto() is False
    state.auto = True
    state.failed()
    assert state.auto is False


def test_requests_are_checked() -> None:
    with pytest.raises(ValueError, match="not a user operation"):
        Request("walk", "a")
    with pytest.raises(ValueError, match="needs a node"):
        Request("jump")
    assert Request("remeasure").what == "the departure" and Request("jump", "x").what == "x"
