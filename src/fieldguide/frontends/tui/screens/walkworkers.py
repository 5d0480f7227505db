"""The thread side of the walk screen: workers that open the target, step the walk, run a node,
re-measure the departure, and sample the target's process tree. Each runs a WalkDriver call
in a thread and only posts messages back (touching a widget from a thread is not safe)."""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.screen import Screen
from textual.worker import get_current_worker

from fieldguide.frontends.tui.driver import Closing, WalkDriver
from fieldguide.frontends.tui.messages import (
    MeterSample,
    NodeFinished,
    NodeStarted,
    OpDone,
    ReadingsArrived,
    RemeasureDone,
    RemeasureStatus,
    SessionFailed,
    SessionReady,
    TargetStarted,
)
from fieldguide.frontends.tui.readings import ReadingPump, sample_tree
from fieldguide.frontends.tui.walkstate import WALK
from fieldguide.report.vocabulary import REMEASURE

METER_SECONDS = 1.0


class WalkWorkers(Screen[None]):
    """The walk screen's workers; the screen (WalkScreen) handles the messages they post."""

    def __init__(self) -> None:
        super().__init__()
        self.pump = ReadingPump(lambda: self.post_message(ReadingsArrived()))
        self.driver: WalkDriver | None = None
        self.meter_pid: int | None = None  # the process the meter samples (a relaunch changes it)

    # -- workers (thread side: post messages only) ------------------------------------------------

    def _started(self, op: str) -> Callable[[str], None]:
        """The callback a worker calls as a node starts measuring (on the worker thread)."""

        def started(node_id: str) -> None:
            self.pump.reset()  # before the probe's first reading, so none is lost
            self.post_message(NodeStarted(node_id, op))

        return started

    @work(thread=True, group="open", exit_on_error=False)
    def _open_worker(self) -> None:
        from fieldguide.errors import FieldguideError

        assert self.driver is not None
        try:
            session = self.driver.open(lambda desc: self.post_message(TargetStarted(desc)))
        except Closing:
            return
        except FieldguideError as err:
            self.post_message(SessionFailed(str(err), list(err.detail), err.exit_code))
            return
        self.post_message(SessionReady(session))

    @work(thread=True, group="walk", exit_on_error=False)
    def _step_worker(self) -> None:
        assert self.driver is not None
        try:
            result, cancelled = self.driver.step(self._started(WALK))
            if result is not None:
                self.post_message(NodeFinished(result, WALK, cancelled))
        except Closing:
            pass
        finally:
            self.post_message(OpDone(WALK))

    @work(thread=True, group="probe", exclusive=True, exit_on_error=False)
    def _node_worker(self, node_id: str, fresh: bool, op: str) -> None:
        assert self.driver is not None
        try:
            result, cancelled = self.driver.run_node(node_id, fresh=fresh, started=self._started(op), action=op)
            self.post_message(NodeFinished(result, op, cancelled or get_current_worker().is_cancelled))
        except Closing:
            pass
        finally:
            self.post_message(OpDone(op))

    @work(thread=True, group="probe", exclusive=True, exit_on_error=False)
    def _remeasure_worker(self) -> None:
        from fieldguide.errors import FieldguideError

        assert self.driver is not None
        try:
            rows, note = self.driver.remeasure(
                status=lambda text: self.post_message(RemeasureStatus(text)),
                started=self._started(REMEASURE))
            self.post_message(RemeasureDone(rows, note))
        except Closing:
            pass
        except FieldguideError as err:
            self.post_message(RemeasureDone([], str(err)))
        finally:
            self.post_message(OpDone(REMEASURE))

    @work(thread=True, group="meter", exclusive=True, exit_on_error=False)
    def _meter_worker(self) -> None:
        """CPU of the main process vs its children, and RSS, once a second, read-only (psutil)."""
        import psutil

        worker = get_current_worker()
        previous: dict[int, float] = {}
        watching: int | None = None
        while not worker.is_cancelled and self.driver is not None and not self.driver.closing.is_set():
            pid = self.meter_pid
            if pid != watching:
                previous.clear()
                watching = pid
            if pid is not None:
                try:
                    self.post_message(MeterSample(*sample_tree(pid, previous, METER_SECONDS)))
                except psutil.Error:
                    self.post_message(MeterSample(None))
            worker.cancelled_event.wait(METER_SECONDS)
