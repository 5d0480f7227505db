"""The rank table under the walk: hidden for one process, a row per rank (the straggler marked)
once a finished node measured two or more, and enter on a row walks that rank's own process.

The walk replays the recorded demo walk (tui_replay) with a constructed rank comparison added:
no job runs, and the factory only records which target each walk asked for.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.pilot import Pilot
from tui_helpers import screen_text, wait_for
from tui_replay import ReplayRunner, ReplayTarget, load

from fieldguide.frontends.tui.app import FieldguideApp, make_app
from fieldguide.frontends.tui.model import TargetSpec
from fieldguide.frontends.tui.screens.departure import DepartureScreen
from fieldguide.frontends.tui.screens.walk import WalkScreen
from fieldguide.frontends.tui.widgets.ranks import STRAGGLER_GLYPH, RankTable, rank_rows, straggler
from fieldguide.measurement import Measurement
from fieldguide.playbook import Playbook
from fieldguide.walk.engine import NodeResult, Walk
from fieldguide.walk.session import Session

SINGLE = {"world_size": 1, "ranks_seen": 1, "own_work_ratio": 1.0, "others_wait_fraction": 0.0,
          "comm_fraction_min": 0.0, "comm_fraction_max": 0.0, "comm_fraction_mean": 0.0}


def rank(n: int, pid: int, step_ms: float, data_wait: float, wait: float, verdict: str) -> dict[str, Any]:
    return {"rank": n, "pid": pid, "host": "node1", "steps": 40, "step_ms": step_ms, "data_wait": data_wait,
            "collective_wait": wait, "producer_cpu": 0.1, "verdict": verdict,
            "own_ms": round(step_ms * (1 - wait), 3)}


# A straggler: rank 1 waits on its input while ranks 0, 2 and 3 wait for it in the all-reduce.
RANKS = [rank(0, 5100, 120.0, 0.02, 0.55, "waits 55% of its step in collectives"),
         rank(1, 5101, 121.0, 0.48, 0.04, "slowest own work: input-bound: 48% of its step passes between steps"),
         rank(2, 5102, 120.5, 0.03, 0.54, "waits 54% of its step in collectives"),
         rank(3, 5103, 119.8, 0.02, 0.56, "waits 56% of its step in collectives")]
STRAGGLING = {"world_size": 4, "ranks_seen": 4, "ranks_measured": 4, "slowest_rank": 1, "own_work_ratio": 2.1,
              "others_wait_fraction": 0.54, "comm_fraction_min": 0.04, "comm_fraction_max": 0.56, "comm_fraction_mean": 0.3}


def recording(values: dict[str, Any], ranks: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The recorded demo walk, with dist.ranks measured as given."""
    data = copy.deepcopy(load())
    evidence = {"ranks": ranks, "table": ranks} if ranks is not None else {}
    data["measurements"].append({"probe": "dist.ranks", "params": {}, "measurement": {
        "probe": "dist.ranks", "values": values, "units": {}, "evidence": evidence,
        "provenance": "constructed", "seconds": 4.0, "unavailable": None}})
    return data


class Recorder:
    """A session factory that serves recordings and remembers which target each walk asked for:
    the job's walk (launched) gets `job`; a walk on a pid (a rank's own) gets one process."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job, self.one = job, recording(SINGLE, None)
        self.specs: list[TargetSpec] = []

    def __call__(self, spec: TargetSpec, playbook: Playbook, on_reading: Callable[[dict[str, Any]], None],
                 echo: Callable[[str], None]) -> Session:
        self.specs.append(spec)
        data = self.one if spec.pid is not None else self.job
        target = ReplayTarget(data)
        session = Session(playbook, target, on_reading=on_reading)
        session.runner = ReplayRunner(target, data, on_reading)
        session.walk = Walk(playbook, target.capabilities, session.runner)
        return session


def job_app(factory: Recorder) -> FieldguideApp:
    return make_app(cmd=["torchrun", "--nproc-per-node", "4", "train.py"], playbook_id="slow-training",
                    session_factory=factory)


async def back_to_walk(pilot: Pilot[object]) -> WalkScreen:
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, DepartureScreen), 30, "the departure")
    await pilot.press("escape")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, WalkScreen), 20, "the walk screen")
    screen = pilot.app.screen
    assert isinstance(screen, WalkScreen)
    return screen


def test_ranks_come_from_any_measurement_with_two_or_more_in_its_evidence() -> None:
    def result(evidence: dict[str, Any]) -> NodeResult:
        return NodeResult(node="any.node", status="pass", measurement=Measurement("any.probe", evidence=evidence))

    assert rank_rows(result({"ranks": RANKS})) == RANKS
    assert rank_rows(result({"ranks": RANKS[:1]})) == [] and rank_rows(result({})) == []
    assert rank_rows(NodeResult(node="any.node", status="pass")) == []
    assert straggler(RANKS) == 1
    # from outside (no step times): the rank that waits least for the others
    shares = [{**r, "own_ms": None, "step_ms": None} for r in RANKS]
    assert straggler(shares) == 1
    assert straggler([{**r, "collective_wait": None, "own_ms": None} for r in RANKS]) is None


async def test_one_process_shows_no_rank_table() -> None:
    factory = Recorder(recording(SINGLE, None))
    app = job_app(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await back_to_walk(pilot)
        assert "dist.ranks" in screen.state.results  # the node ran and finished
        assert not screen.query_one("#ranks", RankTable).display
        assert "coll. wait" not in screen_text(pilot)
        await pilot.press("q")


async def test_a_multi_rank_job_shows_a_row_per_rank_with_the_straggler_marked() -> None:
    factory = Recorder(recording(STRAGGLING, RANKS))
    app = job_app(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await back_to_walk(pilot)
        table = screen.query_one("#ranks", RankTable)
        assert table.display and table.row_count == 4
        assert table.slowest == 1
        cells = [[str(c) for c in table.get_row_at(i)] for i in range(4)]
        assert cells[0][:5] == ["0", "5100", "120.0", "2%", "55%"]
        assert cells[1][:5] == [f"1 {STRAGGLER_GLYPH}", "5101", "121.0", "48%", "4%"]
        straggler_cells = table.get_row_at(1)
        assert all(isinstance(c, Text) and "bold" in str(c.style) for c in straggler_cells)
        assert all(isinstance(c, Text) and "bold" not in str(c.style) for c in table.get_row_at(0))
        text = screen_text(pilot)
        assert "coll. wait" in text and f"1 {STRAGGLER_GLYPH}" in text and "slowest own work" in text
        # it fits 80x24: the tree and panel keep most of the height, the table at most 7 lines
        assert table.region.height <= 7 and screen.query_one("#walk-body").region.height >= 12
        assert table.region.right <= 80
        await pilot.press("q")


async def test_enter_on_a_rank_walks_its_own_process_and_escape_comes_back() -> None:
    factory = Recorder(recording(STRAGGLING, RANKS))
    app = job_app(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        job_walk = await back_to_walk(pilot)
        assert "Back" not in screen_text(pilot).splitlines()[-1]  # the job's walk has nowhere to go back to
        table = job_walk.query_one("#ranks", RankTable)
        table.focus()
        await pilot.press("down")  # rank 1: the straggler
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, WalkScreen) and app.screen is not job_walk
                       or isinstance(app.screen, DepartureScreen), 20, "the rank's walk")
        rank_walk = next(s for s in app.screen_stack if isinstance(s, WalkScreen) and s is not job_walk)
        assert rank_walk.spec.pid == 5101 and rank_walk.spec.kind == "attach"
        assert rank_walk.playbook is job_walk.playbook
        assert "rank 1" in rank_walk.spec.describe()
        await wait_for(pilot, lambda: len(factory.specs) == 2, 20, "the rank's session")
        assert factory.specs[-1].pid == 5101
        # the rank's own walk (one process here) goes on to its own departure
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the rank's departure")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is rank_walk, 20, "the rank's walk")
        assert not rank_walk.query_one("#ranks", RankTable).display
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is job_walk, 20, "the job's walk again")
        assert job_walk.query_one("#ranks", RankTable).row_count == 4
        await pilot.press("escape")  # the job's own walk stays
        await pilot.pause(0.2)
        assert app.screen is job_walk
        await pilot.press("q")


async def test_a_rank_that_cannot_be_read_goes_back_to_the_jobs_walk() -> None:
    from fieldguide.errors import FieldguideError
    from fieldguide.frontends.tui.dialogs.error import ErrorDialog

    class Denied(Recorder):
        def __call__(self, spec: TargetSpec, playbook: Playbook, on_reading: Callable[[dict[str, Any]], None],
                     echo: Callable[[str], None]) -> Session:
            if spec.pid is not None:
                self.specs.append(spec)
                raise FieldguideError(f"ptrace not permitted on pid {spec.pid}")
            return super().__call__(spec, playbook, on_reading, echo)

    factory = Denied(recording(STRAGGLING, RANKS))
    app = job_app(factory)
    async with app.run_test(size=(80, 24)) as pilot:
        job_walk = await back_to_walk(pilot)
        job_walk.query_one("#ranks", RankTable).focus()
        await pilot.press("enter")  # rank 0
        await wait_for(pilot, lambda: isinstance(app.screen, ErrorDialog), 20, "the error")
        assert factory.specs[-1].pid == 5100
        await pilot.press("b")
        await wait_for(pilot, lambda: app.screen is job_walk, 20, "the job's walk again")
        assert job_walk.query_one("#ranks", RankTable).row_count == 4
        await pilot.press("q")
