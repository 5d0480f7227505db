"""Messages from thread workers back to the screens. Posting a message is thread-safe;
touching a widget from a worker thread is not, so workers only ever post these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from fieldguide.engine import NodeResult
    from fieldguide.session import Session


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
    """CPU of the target's main process vs its children, and RSS: the TUI's own psutil sampler."""

    def __init__(self, main_pct: float | None, workers_pct: float = 0.0, workers: int = 0,
                 rss_mb: float = 0.0) -> None:
        super().__init__()
        self.main_pct, self.workers_pct, self.workers, self.rss_mb = main_pct, workers_pct, workers, rss_mb

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MeterSample)


class RemeasureStatus(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class RemeasureDone(Message):
    def __init__(self, rows: list[tuple[str, NodeResult | None, NodeResult]], note: str = "") -> None:
        super().__init__()
        self.rows, self.note = rows, note
