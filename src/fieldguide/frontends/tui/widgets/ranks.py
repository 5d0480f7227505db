"""The ranks of a multi-rank job side by side, under the walk: a row per rank (step time, the
share of its step spent on input and waiting in collectives, its verdict), the rank whose own
work is longest marked. Hidden until a finished node's measurement has two or more ranks in its
evidence; enter on a row asks for that rank's own walk.

The TUI knows no node and no probe by name: any measurement whose evidence has a "ranks" list
(rows of RankStats.row()) fills the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from fieldguide.analysis.ranks import pace, table_values
from fieldguide.probes.evidence import RANKS, RankRow

if TYPE_CHECKING:
    from fieldguide.walk.engine import NodeResult

STRAGGLER_GLYPH = "▶"  # distinct without colour (NO_COLOR terminals)
FIXED_WIDTH = 52  # every column but the verdict, with the cells' padding


def rank_rows(result: NodeResult) -> list[RankRow]:
    """The ranks in a node result's measurement evidence; [] for one process or none."""
    rows = RANKS.of(result.measurement.evidence) if result.measurement is not None else None
    if not isinstance(rows, list) or len(rows) < 2:
        return []
    return [r for r in rows if isinstance(r, dict)]


def straggler(rows: list[RankRow]) -> int | None:
    """The index of the rank with the longest own work, by the rule the rank comparison uses."""
    found = pace([r.get("own_ms") for r in rows], [r.get("collective_wait") for r in rows])
    return None if found is None else found.slowest


def _pct(value: Any) -> str:
    return "—" if value is None else f"{float(value):.0%}"


def _ms(value: Any) -> str:
    return "—" if value is None else f"{float(value):.1f}"


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class RankTable(DataTable[Text]):
    DEFAULT_CSS = """
    RankTable {
        height: auto;
        max-height: 7;
        border-top: hkey $foreground 30%;
        border-title-color: $text-muted;
        scrollbar-size-vertical: 1;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Walk rank", tooltip="Walk the playbook on this rank's own process"),
    ]

    class WalkRequested(Message):
        """Enter on a rank: walk this rank's own process."""

        def __init__(self, rank: int, pid: int) -> None:
            super().__init__()
            self.rank, self.pid = rank, pid

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.rows_shown: list[RankRow] = []
        self.slowest: int | None = None

    def on_mount(self) -> None:
        self.display = False
        self.border_title = "ranks · enter walks one"
        for label, key, width in (("rank", "rank", 4), ("pid", "pid", 7), ("step ms", "step", 7),
                                  ("data wait", "data", 9), ("coll. wait", "coll", 10)):
            self.add_column(label, key=key, width=width)
        self.add_column("verdict", key="verdict")

    def show_result(self, result: NodeResult) -> bool:
        """Fill the table from a finished node if it measured 2+ ranks; else leave it as it was."""
        rows = rank_rows(result)
        if not rows:
            return False
        self.rows_shown, self.slowest = rows, straggler(rows)
        keep = self.cursor_row
        self.clear()
        verdict_width = max(16, self.app.size.width - FIXED_WIDTH)
        for i, row in enumerate(rows):
            slowest = i == self.slowest
            style = f"bold {self.app.current_theme.warning or 'yellow'}" if slowest else ""
            rank = f"{row.get('rank', '?')}{' ' + STRAGGLER_GLYPH if slowest else ''}"
            pid, step, data, waited, verdict = table_values(row)
            cells = (rank, str(pid or "—"), _ms(step), _pct(data), _pct(waited), _fit(str(verdict or ""), verdict_width))
            self.add_row(*(Text(cell, style=style) for cell in cells), key=str(i))
        self.move_cursor(row=min(max(keep, 0), len(rows) - 1))
        self.display = True
        return True

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        row = self.rows_shown[int(str(event.row_key.value))]
        pid = row.get("pid")
        if pid is None:
            self.notify(f"Rank {row.get('rank')} has no pid that fieldguide could read: it cannot be walked alone.")
            return
        self.post_message(self.WalkRequested(int(row.get("rank", -1)), int(pid)))
