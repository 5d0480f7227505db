"""The watch's series: recent points for the checks, and the whole session at one point per
history bin (a median) for the dashboard, so that hours of steps never pile up."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fieldguide.analysis.stats import median
from fieldguide.watch.detect import Point
from fieldguide.watch.rules import KEEP_S  # recent points kept for the checks and the learning

HISTORY_BIN_S = 5.0  # the session's history: one median per bin


@dataclass
class SeriesStore:
    recent: dict[str, list[Point]] = field(default_factory=dict)
    history: dict[str, list[Point]] = field(default_factory=dict)
    ranks: dict[int, list[Point]] = field(default_factory=dict)  # each rank's step time, history bins
    _open_bins: dict[str, tuple[float, list[float]]] = field(default_factory=dict)

    def add(self, series: str, points: list[Point]) -> None:
        kept = self.recent.setdefault(series, [])
        for point in sorted(points):
            if kept and point[0] < kept[-1][0]:
                bisect.insort(kept, point)  # a late stack window: rare, and kept in order
            else:
                kept.append(point)
            self._bin(series, self.history.setdefault(series, []), point)

    def add_rank(self, rank: int, points: list[Point]) -> None:
        for point in sorted(points):
            self._bin(f"rank{rank}", self.ranks.setdefault(rank, []), point)

    def _bin(self, key: str, history: list[Point], point: Point) -> None:
        start = point[0] - point[0] % HISTORY_BIN_S
        bin_start, values = self._open_bins.get(key, (start, []))
        if start < bin_start:
            return  # a late point (a stack window's): the checks have it; the history moved on
        if start != bin_start and values:
            history.append((bin_start + HISTORY_BIN_S / 2, median(values) or 0.0))
            values = []
        values.append(point[1])
        self._open_bins[key] = (start, values)

    def trim(self, now: float) -> None:
        for points in self.recent.values():
            cut = bisect.bisect_left(points, (now - KEEP_S, float("-inf")))
            if cut:
                del points[:cut]

    def latest(self, series: str) -> float | None:
        points = self.recent.get(series)
        return points[-1][1] if points else None
