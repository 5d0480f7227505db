"""The walk: the playbook's tree with each node's state on the left, the node under the cursor
(or measuring) on the right. The walk advances by itself and stops at the first departure;
n steps by hand, r re-runs, enter jumps to a node and measures it, m re-measures.

All measuring happens in thread workers (via WalkDriver); results come back as messages.
One probe operation at a time: a request made while another measures is queued (a walk step
finishes first) or replaces it (a re-run or jump is cancelled: latest wins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Footer, Header, Tree
from textual.worker import Worker, WorkerState, get_current_worker

from fieldguide.tui.dialogs.error import ErrorDialog
from fieldguide.tui.dialogs.export import start_export
from fieldguide.tui.driver import Closing, SessionFactory, WalkDriver
from fieldguide.tui.messages import (
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
from fieldguide.tui.model import MEASURING, WAITING, TargetSpec
from fieldguide.tui.readings import ReadingPump, sample_tree
from fieldguide.tui.widgets.node_panel import NodePanel
from fieldguide.tui.widgets.tree import Item, PlaybookTree

if TYPE_CHECKING:
    from fieldguide.engine import NodeResult
    from fieldguide.playbook import Playbook
    from fieldguide.session import Session
    from fieldguide.tui.screens.departure import DepartureScreen

USER_OPS = ("jump", "rerun", "remeasure")
METER_SECONDS = 1.0


class WalkScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "step", "Next", tooltip="Measure the current node (manual step)"),
        Binding("a", "toggle_auto", "Auto", tooltip="Auto-walk on / paused"),
        Binding("r", "rerun", "Re-run", tooltip="Re-run the node under the cursor"),
        Binding("d", "departure", "Departure", tooltip="Show the departure"),
        Binding("m", "remeasure", "Re-measure", tooltip="Measure the departure again (check a fix)"),
        Binding("e", "export", "Export"),
    ]

    def __init__(self, spec: TargetSpec, playbook: Playbook, factory: SessionFactory, *, auto: bool = True) -> None:
        super().__init__()
        self.spec, self.playbook, self.factory, self.auto = spec, playbook, factory, auto
        self.pump = ReadingPump(lambda: self.post_message(ReadingsArrived()))
        self.driver: WalkDriver | None = None
        self.session: Session | None = None
        self.results: dict[str, NodeResult] = {}
        self.reruns: set[str] = set()
        self.measuring: str | None = None
        self.op: str | None = "open"
        self.pending: tuple[str, str | None, bool] | None = None
        self.previous_state: dict[str, str] = {}
        self.shown: Item | None = None
        self.meter_pid: int | None = None
        self.departure_screen: DepartureScreen | None = None
        self.remeasure_text = ""
        self.remeasure_result: tuple[list[tuple[str, NodeResult | None, NodeResult]], str] | None = None
        self.target_text = spec.describe()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="walk-body"):
            yield PlaybookTree(self.playbook, id="tree")
            yield NodePanel(id="panel")
        yield Footer()

    @property
    def playbook_tree(self) -> PlaybookTree:
        return self.query_one("#tree", PlaybookTree)

    @property
    def panel(self) -> NodePanel:
        return self.query_one("#panel", NodePanel)

    def on_mount(self) -> None:
        app = self.app
        self.driver = WalkDriver(self.spec, self.playbook, self.factory, on_reading=self.pump.offer,
                                 echo=self.pump.offer_output, track=app.track_target)  # type: ignore[attr-defined]
        app.drivers.append(self.driver)  # type: ignore[attr-defined]
        self.title = self.playbook.id
        self._subtitle()
        self.panel.show_message(f"Starting {self.target_text}", self._opening_text(), live=True)
        self.playbook_tree.focus()
        self._open_worker()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The key bar shows what applies now: stepping while the walk goes on, the departure once found."""
        walk = self.session.walk if self.session is not None else None
        if action in ("step", "toggle_auto"):
            return walk is None or not walk.finished
        if action in ("departure", "remeasure"):
            return walk is not None and walk.departure is not None
        return True

    def on_unmount(self) -> None:
        if self.driver is not None:
            self.driver.stop()  # probes still running end at their next check

    def _opening_text(self) -> str:
        if self.spec.kind == "attach":
            return f"Checking that pid {self.spec.pid} can be read (py-spy, /proc)…"
        return "Launching it with fieldguide's agent, then waiting for its first training steps…"

    def _subtitle(self) -> None:
        parts = [self.target_text if self.session is None else self._target_words()]
        if self.session is not None:
            walk = self.session.walk
            if walk.finished:
                parts.append(f"over: {walk.verdict}")
            else:
                parts.append("auto ▶" if self.auto else "paused ‖")
            runner = self.session.runner
            parts.append(f"{runner.spent:.0f}/{runner.budget:.0f} s")
        self.sub_title = " · ".join(parts)

    def _target_words(self) -> str:
        assert self.session is not None
        desc = self.session.target.describe()
        return f"{desc.get('kind')} pid {desc.get('pid')}"

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
            result, cancelled = self.driver.step(self._started("walk"))
            if result is not None:
                self.post_message(NodeFinished(result, "walk", cancelled))
        except Closing:
            pass
        finally:
            self.post_message(OpDone("walk"))

    @work(thread=True, group="probe", exclusive=True, exit_on_error=False)
    def _node_worker(self, node_id: str, fresh: bool, op: str) -> None:
        assert self.driver is not None
        try:
            result, cancelled = self.driver.run_node(
                node_id, fresh=fresh, started=self._started(op))
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
                started=self._started("remeasure"))
            self.post_message(RemeasureDone(rows, note))
        except Closing:
            pass
        except FieldguideError as err:
            self.post_message(RemeasureDone([], str(err)))
        finally:
            self.post_message(OpDone("remeasure"))

    @work(thread=True, group="meter", exclusive=True, exit_on_error=False)
    def _meter_worker(self) -> None:
        """CPU of main vs workers and RSS, once a second, read-only (psutil)."""
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

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            err = event.worker.error
            self.auto = False  # else the walk would retry the same node, and fail, forever
            self.app.push_screen(ErrorDialog("Something went wrong", f"{type(err).__name__}: {err}"))

    # -- messages (UI thread) -------------------------------------------------------------------

    @on(TargetStarted)
    def target_started(self, event: TargetStarted) -> None:
        desc = event.description
        self.target_text = f"{desc.get('kind')} pid {desc.get('pid')}"
        self._subtitle()
        self.panel.live.set_headline(f"{self.target_text} · {' '.join(map(str, desc.get('cmdline') or []))}"[:200])

    @on(SessionReady)
    def session_ready(self, event: SessionReady) -> None:
        self.session = event.session
        self.op = None
        target = event.session.target
        self.meter_pid = target.pid if target.alive() and getattr(target, "kind", "") in ("launch", "attach") else None
        if self.meter_pid is not None:
            self._meter_worker()
        self.panel.live.reset()
        self._subtitle()
        start = self.playbook.start
        self.playbook_tree.move_to(start)
        self._show(("node", start))
        if self.auto:
            self._advance()
        else:
            self.notify("Auto-walk is paused: n measures the current node, a walks on by itself.", timeout=5)

    @on(SessionFailed)
    def session_failed(self, event: SessionFailed) -> None:
        self.op = None
        self.app.exit_hint = event.exit_code  # type: ignore[attr-defined]
        self.panel.show_message("Could not measure the target", event.message)

        def chosen(choice: str | None) -> None:
            if choice == "back":
                self.app.back_to_picker()  # type: ignore[attr-defined]
            else:
                self.app.action_shutdown()  # type: ignore[attr-defined]

        self.app.push_screen(ErrorDialog("Cannot measure the target", event.message, event.detail,
                                         can_go_back=True), chosen)

    @on(NodeStarted)
    def node_started(self, event: NodeStarted) -> None:
        if event.op == "remeasure":
            self.remeasure_text = f"measuring {event.node_id}"
            live = self.driver.live if self.driver is not None else None
            if self.meter_pid is not None and live is not None and live.target.alive():
                self.meter_pid = live.target.pid  # a relaunched job has a new pid
            if self.departure_screen is not None:
                self.departure_screen.remeasure_progress(self.remeasure_text)
            return
        node_id = event.node_id
        self.measuring = node_id
        self.previous_state[node_id] = self.playbook_tree.states.get(node_id, WAITING)
        self.playbook_tree.set_state(node_id, MEASURING)
        self.panel.live.reset()
        if event.op == "walk":
            self.playbook_tree.move_to(node_id)
        self._show(("node", node_id))

    @on(NodeFinished)
    def node_finished(self, event: NodeFinished) -> None:
        result = event.result
        node_id = result.node
        if self.measuring == node_id:
            self.measuring = None
        if event.cancelled and event.op != "walk":
            self.playbook_tree.set_state(node_id, self.previous_state.get(node_id, WAITING))
        else:
            self.playbook_tree.set_state(node_id, result.status)
            self.results[node_id] = result
            if event.op == "walk":
                self.reruns.discard(node_id)
            else:
                self.reruns.add(node_id)
        self._subtitle()
        if self.shown is not None and self.shown[1] == node_id:
            self._show(self.shown)
        if event.op == "walk" and self.session is not None and self.session.walk.finished:
            self._walk_finished()

    @on(OpDone)
    def op_done(self, event: OpDone) -> None:
        self.op = None
        self.measuring = None
        if self.app.closing:  # type: ignore[attr-defined]
            return
        if self.pending is not None:
            op, node_id, fresh = self.pending
            self.pending = None
            self._start_user_op(op, node_id, fresh)
        elif self.auto:
            self._advance()

    @on(ReadingsArrived)
    def readings_arrived(self) -> None:
        readings, output = self.pump.take()
        self.panel.live.update_readings(readings, output)
        if self.departure_screen is not None:
            self.departure_screen.live.update_readings(readings, output)

    @on(MeterSample)
    def meter_sample(self, event: MeterSample) -> None:
        self.panel.live.update_meter(event.main_pct, event.workers_pct, event.workers, event.rss_mb)
        if self.departure_screen is not None:
            self.departure_screen.live.update_meter(event.main_pct, event.workers_pct, event.workers, event.rss_mb)

    @on(RemeasureStatus)
    def remeasure_status(self, event: RemeasureStatus) -> None:
        self.remeasure_text = event.text
        if self.departure_screen is not None:
            self.departure_screen.remeasure_progress(event.text)

    @on(RemeasureDone)
    def remeasure_done(self, event: RemeasureDone) -> None:
        self.remeasure_result = (event.rows, event.note)
        self.remeasure_text = ""
        if self.departure_screen is not None:
            self.departure_screen.remeasure_finished(event.rows, event.note)

    @on(Tree.NodeHighlighted, "#tree")
    def highlighted(self, event: Tree.NodeHighlighted[Item]) -> None:
        if event.node.data is not None:
            self._show(event.node.data)

    @on(PlaybookTree.RunRequested)
    def run_requested(self, event: PlaybookTree.RunRequested) -> None:
        if event.kind not in ("node", "ref"):
            self.notify("That is where the walk ends, not a node: put the cursor on a node and press enter.")
            return
        walk = self.session.walk if self.session is not None else None
        if walk is not None and walk.current == event.item_id and self.op is None and not walk.finished:
            self._start_step()  # the walk's own next node: measure it as a step, on the record
            return
        self._request("jump", event.item_id, fresh=False)

    # -- showing ------------------------------------------------------------------------------------

    def _show(self, item: Item) -> None:
        self.shown = item
        kind, item_id = item
        if kind in ("node", "ref"):
            node = self.playbook.nodes[item_id]
            self.panel.show_node(node, self.playbook_tree.states.get(item_id, WAITING), self.results.get(item_id),
                                 measuring=item_id == self.measuring, rerun=item_id in self.reruns)
        elif kind == "cause":
            cause = self.playbook.causes[item_id]
            departure = self.session.walk.departure if self.session is not None else None
            reached = departure is not None and departure.cause.id == item_id
            self.panel.show_cause(cause, reached, departure.summary if reached and departure else "")
        elif kind == "leaf":
            reached = self.session is not None and self.session.walk.conclusion == item_id
            self.panel.show_leaf(item_id, self.playbook.leaves.get(item_id, ""), reached)

    def _walk_finished(self) -> None:
        assert self.session is not None
        walk = self.session.walk
        self.app.verdict = walk.verdict  # type: ignore[attr-defined]
        self._subtitle()
        self.refresh_bindings()
        if walk.departure is not None:
            self.playbook_tree.mark_reached(walk.departure.cause.id)
            self.action_departure()
        elif walk.conclusion is not None:
            self.playbook_tree.mark_reached(walk.conclusion)
            self.playbook_tree.move_to(walk.conclusion)
            self.notify(f"Clean: the walk reached the healthy leaf {walk.conclusion}.", title="Walk over", timeout=8)
        else:
            self.notify(walk.caveat or "The walk could not measure what it needed.",
                        title="Inconclusive", severity="warning", timeout=10)

    # -- actions ---------------------------------------------------------------------------------------

    def _start_step(self) -> None:
        self.op = "walk"
        self._step_worker()

    def _advance(self) -> None:
        if self.session is None or self.session.walk.finished or self.op is not None or self.app.closing:  # type: ignore[attr-defined]
            return
        self._start_step()

    def _set_auto(self, value: bool) -> None:
        self.auto = value
        self._subtitle()

    def action_step(self) -> None:
        if self.session is None:
            self.notify("The target is still starting.")
            return
        if self.session.walk.finished:
            self.notify(f"The walk is over ({self.session.walk.verdict}). r re-runs the node under the cursor, "
                        "enter jumps to one, m re-measures the departure.")
            return
        if self.op is not None:
            self.notify(f"Busy measuring {self.measuring or 'the target'}; press n again when it is done.")
            return
        self._set_auto(False)
        self._start_step()

    def action_toggle_auto(self) -> None:
        self._set_auto(not self.auto)
        self.notify("Auto-walk on." if self.auto else "Auto-walk paused after this node; n steps by hand.",
                    timeout=3)
        if self.auto:
            self._advance()

    def action_rerun(self) -> None:
        item = self.playbook_tree.cursor_item
        if item is None or item[0] not in ("node", "ref"):
            self.notify("Put the cursor on a node to re-run it.")
            return
        self._request("rerun", item[1], fresh=True)

    def action_remeasure(self) -> None:
        if self.session is None or self.session.walk.departure is None:
            self.notify("Nothing to re-measure yet: m checks a fix once the walk has found a departure.")
            return
        self._request("remeasure", None, fresh=True)

    def action_departure(self) -> None:
        from fieldguide.tui.screens.departure import DepartureScreen

        if self.session is None or self.session.walk.departure is None:
            self.notify("No departure (yet).")
            return
        if self.departure_screen is None:
            self.departure_screen = DepartureScreen(self)
            self.app.push_screen(self.departure_screen)

    def departure_closed(self) -> None:
        self.departure_screen = None

    def action_export(self) -> None:
        assert self.driver is not None
        start_export(self, self.driver)

    def _request(self, op: str, node_id: str | None, fresh: bool) -> None:
        if self.session is None or self.driver is None:
            self.notify("The target is still starting.")
            return
        if self.auto and not self.session.walk.finished:
            self._set_auto(False)
            self.notify("Auto-walk paused (a resumes it).", timeout=3)
        what = node_id or "the departure"
        if self.op is None:
            self._start_user_op(op, node_id, fresh)
        elif self.op == "walk":
            self.pending = (op, node_id, fresh)
            self.notify(f"Queued: {what} is measured once {self.measuring or 'this node'} is done.", timeout=3)
        else:
            self.pending = (op, node_id, fresh)
            self.driver.cancel_current()
            self.notify(f"Cancelling {self.measuring or self.op}; then measuring {what}.", timeout=3)

    def _start_user_op(self, op: str, node_id: str | None, fresh: bool) -> None:
        self.op = op
        if op == "remeasure":
            self.remeasure_result = None
            self.remeasure_text = "starting"
            if self.departure_screen is not None:
                self.departure_screen.remeasure_progress(self.remeasure_text)
            else:
                self.notify("Re-measuring the departure; d shows it.", timeout=3)
            self._remeasure_worker()
        else:
            assert node_id is not None
            self._node_worker(node_id, fresh, op)
