"""Memory over time: the growth a series shows, and the headroom a peak leaves under a limit.

Pure arithmetic on (x, bytes) points, shared by the probes that read memory from inside
the job (per step) and from outside (per second), and tested on constructed series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fieldguide.analysis.stats import median

MB = 2**20
MIN_R2 = 0.5  # growth that a line explains less well than this is noise, not a trend


@dataclass(frozen=True)
class Growth:
    slope: float  # bytes per unit of x (per step, or per second)
    r2: float  # how well a straight line explains the series (0..1)
    sustained: bool  # each third of the window sits higher than the one before
    total: float  # bytes from the first third's median to the last third's
    points: int
    slope_se: float = 0.0  # the slope's standard error (the points' scatter about the line)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and r² of ys against xs; (0, 0) when xs do not vary."""
    n = len(xs)
    if n < 2:
        return 0.0, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    if sxx == 0:
        return 0.0, 0.0
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    return slope, r2


def growth(xs: Sequence[float], ys: Sequence[float]) -> Growth | None:
    """The trend of a memory series; None with fewer than 6 points.

    A leak is growth that persists: the slope alone is fooled by one late allocation,
    so the window is cut in thirds and each must sit above the one before (medians), and
    a straight line must explain at least half of the variance (allocator noise of a few MB
    makes three rising medians by chance one time in six)."""
    if len(xs) < 6 or len(xs) != len(ys):
        return None
    slope, r2 = fit_line(xs, ys)
    third = len(ys) // 3
    parts = [median(ys[:third]), median(ys[third:2 * third]), median(ys[2 * third:])]
    a, b, c = (float(p or 0.0) for p in parts)
    return Growth(slope=slope, r2=r2, sustained=a < b < c and r2 >= MIN_R2, total=c - a, points=len(xs),
                  slope_se=slope_error(xs, ys, slope))


def slope_error(xs: Sequence[float], ys: Sequence[float], slope: float) -> float:
    """The least-squares slope's standard error: the residuals' spread over the xs' spread."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 3 or sxx == 0:
        return 0.0
    residual = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, ys, strict=True))
    return float((residual / (n - 2) / sxx) ** 0.5)


def growth_margin(g: Growth) -> float:
    """± of `sustained_rate(g)` (bytes per unit of x). A sustained trend: two standard errors.

    An uneven trend reads 0, but the truth may be as high as the slope's upper bound
    (slope + 2 SE): that is its margin, so a reading of 0 whose bound reaches a threshold is
    measured again over a longer window, or called too close to call, never called clean. A leak
    under a wobbling floor (batches of changing length, ±30-60 MB) rises unevenly, its lower
    bound below 0, and is still such a reading. Only a floor whose upper bound is at or below 0
    (it demonstrably did not rise) reads 0 with no margin. The price: a healthy job whose floor
    wobbles widely (beside a busy core) may be too close to call, never a leak called flat."""
    if g.sustained:
        return 2.0 * g.slope_se
    return max(g.slope + 2.0 * g.slope_se, 0.0)


def floors(ts: Sequence[float], ys: Sequence[float], width: float = 1.0) -> tuple[list[float], list[float]]:
    """The lowest value in each `width`-second bin: what stays allocated, without the spikes of
    temporaries that come and go within a step (the floor of a leaking job rises; a healthy one's is flat)."""
    bins: dict[int, tuple[float, float]] = {}
    for t, y in zip(ts, ys, strict=True):
        key = int((t - ts[0]) // width)
        if key not in bins or y < bins[key][1]:
            bins[key] = (t, y)
    ordered = [bins[k] for k in sorted(bins)]
    return [t for t, _ in ordered], [y for _, y in ordered]


def sustained_rate(g: Growth | None) -> float | None:
    """Bytes per unit of x that persist across the window, 0 when the growth does not."""
    if g is None:
        return None
    return g.slope if g.sustained and g.slope > 0 else 0.0


def tightest(limits: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The limit whose peak use comes closest to it (each limit counts use its own way)."""
    scored = [dict(lim, fraction=lim["peak"] / lim["limit"]) for lim in limits
              if lim.get("limit") and lim.get("peak") is not None]
    return max(scored, key=lambda lim: lim["fraction"]) if scored else None


CATEGORIES = ("activations", "optimizer_state", "parameters", "other")


def shares(parts: dict[str, int | None]) -> tuple[dict[str, float], str | None]:
    """Each category's share of what was counted, and the largest; parameters include gradients."""
    counted = {"activations": parts.get("activations") or 0,
               "optimizer_state": parts.get("optimizer_state") or 0,
               "parameters": (parts.get("parameters") or 0) + (parts.get("gradients") or 0),
               "other": parts.get("other_tensors") or 0}
    total = sum(counted.values())
    if total <= 0:
        return {}, None
    share = {k: v / total for k, v in counted.items()}
    return share, max(CATEGORIES, key=lambda k: share[k])


def mb(value: float | None) -> float | None:
    return round(value / MB, 1) if value is not None else None
