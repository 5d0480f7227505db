"""The walk: the playbook's tree with each node's state on the left, the node under the cursor
(or measuring) on the right. The walk advances by itself and stops at the first departure;
n steps by hand, r re-runs, enter jumps to a node and measures it, m re-measures.

All measuring happens in thread workers (via WalkDriver); results come back as messages.
What runs, what waits and whether the walk advances by itself is decided by WalkState (plain,
unit-tested); this screen does the UI side of each decision. What the departure screen needs
from the walk (live readings, the re-measure) the app routes to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Header, Tree
from textual.worker import Worker, WorkerState

from fieldguide.frontends.tui.dialogs.error import ErrorDialog
from fieldguide.frontends.tui.dialogs.export import start_export
from fieldguide.frontends.tui.driver import SessionFactory, WalkDriver
from fieldguide.frontends.tui.messages import (
    LiveUpdate,
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
from fieldguide.frontends.tui.model import HEADER_ICON, TargetSpec, stop_reason
from fieldguide.frontends.tui.screens.walkworkers import WalkWorkers
from fieldguide.frontends.tui.walkstate import ADVANCE, QUEUE, START, WALK, Request, WalkState
from fieldguide.frontends.tui.widgets.gpu import GpuPanel
from fieldguide.frontends.tui.widgets.node_panel import NodePanel
from fieldguide.frontends.tui.widgets.ranks import RankTable
from fieldguide.frontends.tui.widgets.tree import Item, PlaybookTree
from fieldguide.report.vocabulary import JUMP, MEASURING, REMEASURE, RERUN, WAITING

if TYPE_CHECKING:
    from textual import getters

    from fieldguide.frontends.tui.app import FieldguideApp
    from fieldguide.playbook import Playbook
    from fieldguide.walk.session import Session


class WalkScreen(WalkWorkers):
    HELP_SECTION = "Walk"  # its keys first in the help
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "step", "Next", tooltip="Measure the current node (manual step)"),
        Binding("a", "toggle_auto", "Auto", tooltip="Auto-walk on / paused"),
        Binding("r", "rerun", "Re-run", tooltip="Re-run the node under the cursor"),
        Binding("d", "departure", "Departure", tooltip="Show the departure"),
        Binding("m", "remeasure", "Re-measure", tooltip="Measure the departure again (check a fix)"),
        Binding("e", "export", "Export"),
        Binding("escape", "back", "Back", tooltip="Back to the walk of the whole job"),
    ]

    if TYPE_CHECKING:
        app = getters.app(FieldguideApp)

    def __init__(self, spec: TargetSpec, playbook: Playbook, factory: SessionFactory, *, auto: bool = True) -> None:
        super().__init__()
        self.spec, self.playbook, self.factory = spec, playbook, factory
        self.state = WalkState(auto=auto)
        self.session: Session | None = None
        self.shown: Item | None = None
        self.target_text = spec.describe()

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon=HEADER_ICON)
        with Horizontal(id="walk-body"):
            yield PlaybookTree(self.playbook, id="tree")
            yield NodePanel(id="panel")
        yield RankTable(id="ranks")
        yield GpuPanel(id="walk-gpus")
        yield Footer()

    @property
    def playbook_tree(self) -> PlaybookTree:
        return self.query_one("#tree", PlaybookTree)

    @property
    def panel(self) -> NodePanel:
        return self.query_one("#panel", NodePanel)

    def on_mount(self) -> None:
        self.driver = WalkDriver(self.spec, self.playbook, self.factory, on_reading=self.pump.offer,
                                 echo=self.pump.offer_output, track=self.app.track_target)
        self.app.drivers.append(self.driver)
        self.title = self.playbook.id
        self._subtitle()
        self.panel.show_message(f"Starting {self.target_text}", self._opening_text(), live=True)
        self.playbook_tree.focus()
        # After the first frame: opening imports the walk's machinery and starts the job, and a
        # thread doing that beside the first paint (one GIL) held the first screen back ~100 ms.
        self.call_after_refresh(self._open_worker)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The key bar shows what applies now: stepping while the walk goes on, the departure once found."""
        walk = self.session.walk if self.session is not None else None
        if action in ("step", "toggle_auto"):
            return walk is None or not walk.finished
        if action in ("departure", "remeasure"):
            return walk is not None and walk.departure is not None
        if action == "back":
            return self.of_rank
        return True

    @property
    def of_rank(self) -> bool:
        """A rank's own walk, opened from the job's walk below it (esc goes back to it)."""
        stack = self.app.screen_stack
        return self in stack and any(isinstance(s, WalkScreen) for s in stack[: stack.index(self)])

    def action_back(self) -> None:
        if self.of_rank and self.app.screen is self:
            self.app.pop_screen()

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
                parts.append("auto ▶" if self.state.auto else "paused ‖")
            runner = self.session.runner
            parts.append(f"{runner.spent:.0f}/{runner.budget:.0f} s")
        self.sub_title = " · ".join(parts)

    def _target_words(self) -> str:
        assert self.session is not None
        desc = self.session.target.describe()
        return f"{desc.get('kind')} pid {desc.get('pid')}"

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            err = event.worker.error
            self.state.failed()
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
        advance = self.state.opened()
        target = event.session.target
        self.meter_pid = target.pid if target.alive() and getattr(target, "kind", "") in ("launch", "attach") else None
        if self.meter_pid is not None:
            self._meter_worker()
        self.panel.live.reset()
        self._subtitle()
        start = self.playbook.start
        self.playbook_tree.move_to(start)
        self._show(("node", start))
        if advance:
            self._advance()
        else:
            self.notify("Auto-walk is paused: n measures the current node, a walks on by itself.", timeout=5)

    @on(SessionFailed)
    def session_failed(self, event: SessionFailed) -> None:
        self.state.open_failed()
        self.app.exit_hint = event.exit_code
        self.panel.show_message("Could not measure the target", event.message)

        def chosen(choice: str | None) -> None:
            if choice == "back" and self.of_rank:
                self.app.pop_screen()  # a rank that cannot be read: back to the job's walk
            elif choice == "back":
                self.app.back_to_picker()
            else:
                self.app.action_shutdown()

        self.app.push_screen(ErrorDialog("Cannot measure the target", event.message, event.detail,
                                         can_go_back=True), chosen)

    @on(NodeStarted)
    def node_started(self, event: NodeStarted) -> None:
        node_id = event.node_id
        if not self.state.node_started(node_id, event.op, self.playbook_tree.states.get(node_id, WAITING)):
            live = self.driver.live if self.driver is not None else None
            if self.meter_pid is not None and live is not None and live.target.alive():
                self.meter_pid = live.target.pid  # a relaunched job has a new pid
            self.app.route(RemeasureStatus(self.state.remeasure.text))
            return
        self.playbook_tree.set_state(node_id, MEASURING)
        self.panel.live.reset()
        if event.op == WALK:
            self.playbook_tree.move_to(node_id)
        self._show(("node", node_id))

    @on(NodeFinished)
    def node_finished(self, event: NodeFinished) -> None:
        node_id = event.result.node
        self.playbook_tree.set_state(node_id, self.state.node_finished(event.result, event.op, event.cancelled))
        if not event.cancelled:
            self.query_one("#ranks", RankTable).show_result(event.result)
        self._subtitle()
        if self.shown is not None and self.shown[1] == node_id:
            self._show(self.shown)
        if event.op == WALK and self.session is not None and self.session.walk.finished:
            self._walk_finished()

    @on(OpDone)
    def op_done(self, event: OpDone) -> None:
        after = self.state.done(closing=self.app.closing)
        if isinstance(after, Request):
            self._run(after)
        elif after == ADVANCE:
            self._advance()

    @on(ReadingsArrived)
    def readings_arrived(self) -> None:
        readings, output = self.pump.take()
        self.panel.live.update_readings(readings, output)
        self.app.route(LiveUpdate(readings, output))

    @on(MeterSample)
    def meter_sample(self, event: MeterSample) -> None:
        self.panel.live.update_meter(event.main_pct, event.children_pct, event.children, event.rss_mib)
        self.app.route(MeterSample(event.main_pct, event.children_pct, event.children, event.rss_mib))

    @on(RemeasureStatus)
    def remeasure_status(self, event: RemeasureStatus) -> None:
        self.state.remeasure_status(event.text)
        self.app.route(RemeasureStatus(event.text))

    @on(RemeasureDone)
    def remeasure_done(self, event: RemeasureDone) -> None:
        self.state.remeasure_done(event.rows, event.note)
        self.app.route(RemeasureDone(event.rows, event.note))

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
        if walk is not None and self.state.enter_is_step(event.item_id, current=walk.current, finished=walk.finished):
            self._start_step()  # the walk's own next node: measure it as a step, on the record
            return
        self._request(Request(JUMP, event.item_id, fresh=False))

    @on(RankTable.WalkRequested)
    def rank_walk(self, event: RankTable.WalkRequested) -> None:
        self.app.start_walk(TargetSpec(pid=event.pid, label=f"rank {event.rank} · pid {event.pid}"), self.playbook)

    # -- showing ------------------------------------------------------------------------------------

    def _show(self, item: Item) -> None:
        self.shown = item
        kind, item_id = item
        if kind in ("node", "ref"):
            node = self.playbook.nodes[item_id]
            self.panel.show_node(node, self.playbook_tree.states.get(item_id, WAITING),
                                 self.state.results.get(item_id), measuring=item_id == self.state.measuring,
                                 rerun=item_id in self.state.reruns)
        elif kind == "cause":
            cause = self.playbook.causes[item_id]
            departure = self.session.walk.departure if self.session is not None else None
            reached = departure is not None and departure.cause.id == item_id
            self.panel.show_cause(cause, reached, departure.summary if reached and departure else "")
        elif kind == "leaf":
            reached = self.session is not None and self.session.walk.conclusion == item_id
            cold = self.session.cold_start() if reached and self.session is not None else None
            self.panel.show_leaf(item_id, self.playbook.leaves.get(item_id, ""), reached, cold)
        elif kind == "stop":  # its line in the tree is cut at the pane's width: the whole reason here
            self.panel.show_message("■ the walk ends here, with no cause", stop_reason(item_id))

    def _walk_finished(self) -> None:
        assert self.session is not None
        walk = self.session.walk
        self.app.verdict = walk.verdict
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
        self.state.start_step()
        self._step_worker()

    def _advance(self) -> None:
        ready = self.session is not None
        finished = self.session is not None and self.session.walk.finished
        if self.state.can_advance(ready=ready, finished=finished, closing=self.app.closing):
            self._start_step()

    def _set_auto(self, value: bool) -> None:
        self.state.auto = value
        self._subtitle()

    def action_step(self) -> None:
        walk = self.session.walk if self.session is not None else None
        answer = self.state.step_key(ready=walk is not None, finished=walk is not None and walk.finished)
        if answer == "starting":
            self.notify("The target is still starting.")
        elif answer == "over" and walk is not None:
            self.notify(f"The walk is over ({walk.verdict}). r re-runs the node under the cursor, "
                        "enter jumps to one, m re-measures the departure.")
        elif answer == "busy":
            self.notify(f"Busy measuring {self.state.measuring or 'the target'}; press n again when it is done.")
        else:
            self._subtitle()
            self._step_worker()

    def action_toggle_auto(self) -> None:
        auto = self.state.toggle_auto()
        self._subtitle()
        self.notify("Auto-walk on." if auto else "Auto-walk paused after this node; n steps by hand.", timeout=3)
        if auto:
            self._advance()

    def action_rerun(self) -> None:
        item = self.playbook_tree.cursor_item
        if item is None or item[0] not in ("node", "ref"):
            self.notify("Put the cursor on a node to re-run it.")
            return
        self._request(Request(RERUN, item[1], fresh=True))

    def action_remeasure(self) -> None:
        if self.session is None or self.session.walk.departure is None:
            self.notify("Nothing to re-measure yet: m checks a fix once the walk has found a departure.")
            return
        self._request(Request(REMEASURE, None, fresh=True))

    def action_departure(self) -> None:
        from fieldguide.frontends.tui.screens.departure import DepartureScreen

        if self.session is None or self.session.walk.departure is None or self.driver is None:
            self.notify("No departure (yet).")
            return
        if not self.app.showing(DepartureScreen):
            self.app.push_screen(DepartureScreen(self.driver.findings(), self.playbook, self.state.remeasure,
                                                 self.driver))

    def action_export(self) -> None:
        assert self.driver is not None
        start_export(self, self.driver)

    def _request(self, request: Request) -> None:
        if self.session is None or self.driver is None:
            self.notify("The target is still starting.")
            return
        outcome, paused = self.state.request(request, finished=self.session.walk.finished)
        if paused:
            self._subtitle()
            self.notify("Auto-walk paused (a resumes it).", timeout=3)
        if outcome == START:
            self._run(request)
        elif outcome == QUEUE:
            self.notify(f"Queued: {request.what} is measured once {self.state.measuring or 'this node'} is done.",
                        timeout=3)
        else:
            self.driver.cancel_current()
            self.notify(f"Cancelling {self.state.measuring or self.state.op}; then measuring {request.what}.",
                        timeout=3)

    def _run(self, request: Request) -> None:
        """Start the worker of a request that WalkState has begun."""
        from fieldguide.frontends.tui.screens.departure import DepartureScreen

        if request.op == REMEASURE:
            if self.app.showing(DepartureScreen):
                self.app.route(RemeasureStatus(self.state.remeasure.text))
            else:
                self.notify("Re-measuring the departure; d shows it.", timeout=3)
            self._remeasure_worker()
        else:
            assert request.node_id is not None
            self._node_worker(request.node_id, request.fresh, request.op)
