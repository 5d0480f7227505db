"""Messages from thread workers back to the screens, and between screens through the app.
Posting a message is thread-safe; touching a widget from a worker thread is not, so workers
only ever post these. Screens hold no reference to each other: the app routes what one
screen has for another (FieldguideApp.route)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from fieldguide.walk.engine import NodeResult
    from fieldguide.walk.session import Session


class TargetStarted(Message):
    """The target exists (a launched job has a pid); it may not be measurable yet."""

    def __init__(self, description: dict[str, Any]) -> None:
        super().__init__()
        self.description = description


class SessionReady(Message):
    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session


class SessionFailed(Message):
    def __init__(self, message: str, detail: list[str], exit_code: int) -> None:
        super().__init__()
        self.message, self.detail, self.exit_code = message, detail, exit_code


class NodeStarted(Message):
    def __init__(self, node_id: str, op: str) -> None:
        super().__init__()
        self.node_id, self.op = node_id, op


class NodeFinished(Message):
    def __init__(self, result: NodeResult, op: str, cancelled: bool = False) -> None:
        super().__init__()
        self.result, self.op, self.cancelled = result, op, cancelled


class OpDone(Message):
    """A walk step, re-run, jump or re-measure is over (whatever happened): the next may start."""

    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op


class ReadingsArrived(Message):
    """New live readings wait in the screen's ReadingPump. At most one is ever queued."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ReadingsArrived)


class MeterSample(Message):
    """CPU of the target's main process vs its child processes, and the tree's resident memory
    (MiB): the TUI's own psutil sampler. `main_pct` None: the process could not be read."""

    def __init__(self, main_pct: float | None, children_pct: float = 0.0, children: int = 0,
                 rss_mib: float = 0.0) -> None:
        super().__init__()
        self.main_pct, self.children_pct, self.children, self.rss_mib = main_pct, children_pct, children, rss_mib

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MeterSample)


class LiveUpdate(Message):
    """The latest readings of each probe and the job's last output lines, as the walk screen took
    them from its ReadingPump; routed by the app to the departure screen while it is open."""

    def __init__(self, readings: dict[str, dict[str, Any]], output: list[str]) -> None:
        super().__init__()
        self.readings, self.output = readings, output

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LiveUpdate)


class RemeasureRequested(Message):
    """The departure screen asks for a re-measure; the app routes it to the walk."""


class ExportRequested(Message):
    """The departure screen asks for an export; the app routes it to the walk."""


class RemeasureStatus(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RemeasureDone(Message):
    def __init__(self, rows: list[tuple[str, NodeResult | None, NodeResult]], note: str = "") -> None:
        super().__init__()
        self.rows, self.note = rows, note
