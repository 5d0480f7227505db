"""How far a share-of-time reading may be from the truth, from the window that gave it.

Two shapes of reading: a share of stack samples (binomial: each sample is in the phase or not)
and a ratio of summed per-step times (the steps' own spread). Both give about two standard
errors (about 95%): the engine re-measures a reading that close to its threshold, and does not
judge one that stays there (engine.judge).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def share_margin(share: float, samples: int) -> float:
    """± for a share of `samples` samples; the 1/n keeps a share of 0 or 1 from looking exact."""
    if samples <= 0:
        return 1.0
    return 2.0 * math.sqrt((share * (1.0 - share) + 1.0 / samples) / samples)


def ratio_margin(parts: Sequence[float], wholes: Sequence[float]) -> float | None:
    """± for sum(parts) / sum(wholes) over steps (a ratio estimator's standard error, twice);
    None for fewer than two steps."""
    count = len(wholes)
    total = sum(wholes)
    if count < 2 or len(parts) != count or total <= 0:
        return None
    ratio = sum(parts) / total
    spread = sum((p - ratio * w) ** 2 for p, w in zip(parts, wholes, strict=True)) / (count - 1)
    return 2.0 * math.sqrt(spread / count) / (total / count)


def events_margin(share: float, events: int) -> float:
    """± for a share made of `events` events that recur in the loop (epoch starts): they come
    once a period, not at random, so a window holds one more or one fewer than its length's
    due, whatever its phase; the count's uncertainty is one event's share."""
    return share / max(events, 1)
