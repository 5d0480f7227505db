"""One series of a watched job over the whole session: a chart of block characters rows high,
the baseline drawn as a dotted line where no bar covers it, its name, its latest value and
its baseline. Readable without colour: the line is its own character."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text

BLOCKS = " ▁▂▃▄▅▆▇█"
BASELINE = "┄"


def resample(values: list[float], width: int) -> list[float]:
    """At most `width` columns: the latest `width` values, or each column the max of its share
    (a spike must stay visible when hours are drawn in 60 columns)."""
    if len(values) <= width:
        return values
    step = len(values) / width
    return [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)]) for i in range(width)]


def chart_rows(values: list[float], baseline: float | None, width: int, height: int) -> list[str]:
    """`height` rows of `width` cells, top row first, on a 0..max scale (the baseline included)."""
    columns = resample(values, width)
    top = max([*columns, baseline or 0.0, 1e-9])
    levels = [v / top * height * 8 for v in columns]
    base_row = None if baseline is None else min(height - 1, int(baseline / top * height))
    rows = []
    for row in range(height - 1, -1, -1):  # top first
        cells = []
        for level in levels:
            fill = min(8, max(0, int(round(level - row * 8))))
            cells.append(BASELINE if fill == 0 and row == base_row else BLOCKS[fill])
        cells += [BASELINE if row == base_row else " "] * (width - len(levels))
        rows.append("".join(cells))
    return rows


class SeriesChart:
    """A Rich renderable: a label line, then the chart; the label is cut to the width given."""

    def __init__(self, label: str, values: list[float], baseline: float | None, height: int = 2,
                 style: str = "") -> None:
        self.label, self.values, self.baseline, self.height, self.style = label, values, baseline, height, style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, 10)
        yield Text(self.label[:width], style="bold")
        for row in chart_rows(self.values, self.baseline, width, self.height):
            yield Text(row, style=self.style)
