"""What the SVG charts (charts.py) and the terminal timeline (timeline.py) share: the palette,
so a phase has one colour in both, and how numbers are read and written on a drawing."""

from __future__ import annotations

import math

COLOURS = ("#0969da", "#cf222e", "#8250df", "#1a7f37", "#9a6700", "#bf3989", "#57606a")


def number(value: object) -> float | None:
    """A finite number, or None (NaN, inf, booleans and text are not numbers to draw)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def fmt(value: float, unit: str = "") -> str:
    """`1,234 ms`, `0.25 s`: three significant digits, thousands grouped."""
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{text} {unit}".strip()
