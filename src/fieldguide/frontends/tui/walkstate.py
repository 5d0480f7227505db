"""What the walk screen is doing, as plain state: which probe operation runs, which one waits,
whether the walk advances by itself, what each node showed before it was measured again, and
how the re-measure goes. No Textual: the screen asks this class what to do and does the UI part
(workers, notifications); the unit tests drive it directly.

One probe operation at a time. A request made while the walk steps waits for the step (queued);
a request made while a re-run, jump or re-measure runs replaces it (the running one is cancelled:
the latest wins).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fieldguide.report.vocabulary import ACTIONS, REMEASURE, WAITING

if TYPE_CHECKING:
    from fieldguide.walk.engine import NodeResult

OPEN, WALK = "open", "walk"  # opening the target; a step of the walk itself
START, QUEUE, REPLACE = "start", "queue", "replace"  # what became of a user's request
ADVANCE = "advance"  # after an operation: the walk takes its next step

RemeasureRows = list[tuple[str, "NodeResult | None", "NodeResult"]]


@dataclass(frozen=True)
class Request:
    """A user's probe operation: a re-run, a jump, or a re-measure of the departure."""

    op: str
    node_id: str | None = None
    fresh: bool = False

    def __post_init__(self) -> None:
        if self.op not in ACTIONS:
            raise ValueError(f"not a user operation: {self.op!r}")
        if self.op != REMEASURE and self.node_id is None:
            raise ValueError(f"a {self.op} needs a node")

    @property
    def what(self) -> str:
        return self.node_id or "the departure"


@dataclass
class Remeasure:
    """How the re-measure of the departure goes: what it is doing, and what it found."""

    running: bool = False
    text: str = ""
    rows: RemeasureRows | None = None
    note: str = ""


@dataclass
class WalkState:
    auto: bool = True
    op: str | None = OPEN  # the probe operation running now, None when idle
    pending: Request | None = None
    measuring: str | None = None  # the node measuring now (not during a re-measure)
    results: dict[str, NodeResult] = field(default_factory=dict)  # the latest result shown per node
    reruns: set[str] = field(default_factory=set)  # nodes whose latest result is not the walk's own
    before: dict[str, str] = field(default_factory=dict)  # a node's state before its measuring began
    remeasure: Remeasure = field(default_factory=Remeasure)

    # -- opening ------------------------------------------------------------------------------------

    def opened(self) -> bool:
        """The target is ready; True if the walk should start stepping by itself."""
        self.op = None
        return self.auto

    def open_failed(self) -> None:
        self.op = None

    # -- the walk's own steps ----------------------------------------------------------------------

    def can_advance(self, *, ready: bool, finished: bool, closing: bool) -> bool:
        return ready and not finished and self.op is None and not closing

    def start_step(self) -> None:
        self.op = WALK

    def step_key(self, *, ready: bool, finished: bool) -> str:
        """n (a manual step): "starting", "over", "busy", or "step" (auto-walk is paused, the step begins)."""
        if not ready:
            return "starting"
        if finished:
            return "over"
        if self.op is not None:
            return "busy"
        self.auto = False
        self.start_step()
        return "step"

    def enter_is_step(self, node_id: str, *, current: str | None, finished: bool) -> bool:
        """Enter on the walk's own next node, when idle, measures it as a step, on the record."""
        return current == node_id and self.op is None and not finished

    def toggle_auto(self) -> bool:
        self.auto = not self.auto
        return self.auto

    def failed(self) -> None:
        """A worker raised: stop walking by itself, else it would retry the same node forever."""
        self.auto = False

    # -- the user's operations -------------------------------------------------------------------------

    def request(self, request: Request, *, finished: bool) -> tuple[str, bool]:
        """A re-run, jump or re-measure asked for. Returns (START, QUEUE or REPLACE, whether
        auto-walk was paused by it). START: begin it now (`begin` has been called). QUEUE: it
        starts when the step ends. REPLACE: cancel the running operation; it starts after."""
        paused = self.auto and not finished
        if paused:
            self.auto = False
        if self.op is None:
            self.begin(request)
            return START, paused
        self.pending = request
        return (QUEUE if self.op == WALK else REPLACE), paused

    def begin(self, request: Request) -> None:
        self.op = request.op
        if request.op == REMEASURE:
            self.remeasure = Remeasure(running=True, text="starting")

    def done(self, *, closing: bool) -> Request | str | None:
        """An operation is over. Returns the request to begin now (already begun), ADVANCE when
        the walk should take its next step, or None."""
        self.op = None
        self.measuring = None
        if closing:
            return None
        if self.pending is not None:
            request, self.pending = self.pending, None
            self.begin(request)
            return request
        return ADVANCE if self.auto else None

    # -- nodes ------------------------------------------------------------------------------------------

    def node_started(self, node_id: str, op: str, state_before: str) -> bool:
        """A node begins measuring. False for a re-measure's node (it has no line of its own)."""
        if op == REMEASURE:
            self.remeasure.text = f"measuring {node_id}"
            return False
        self.measuring = node_id
        self.before[node_id] = state_before
        return True

    def node_finished(self, result: NodeResult, op: str, cancelled: bool) -> str:
        """A node's result is in; returns the state its line shows now. A cancelled re-run or
        jump leaves the node as it was; a walk step is on the record even when cut short."""
        node_id = result.node
        if self.measuring == node_id:
            self.measuring = None
        if cancelled and op != WALK:
            return self.before.get(node_id, WAITING)
        self.results[node_id] = result
        if op == WALK:
            self.reruns.discard(node_id)
        else:
            self.reruns.add(node_id)
        return result.status

    # -- the re-measure ---------------------------------------------------------------------------------

    def remeasure_status(self, text: str) -> None:
        self.remeasure.text = text

    def remeasure_done(self, rows: RemeasureRows, note: str) -> None:
        self.remeasure = Remeasure(running=False, text="", rows=rows, note=note)
