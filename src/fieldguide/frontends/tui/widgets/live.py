"""Live readings of the probe that is measuring: progress, the series it declares (its first
two, e.g. a step and the wait inside it, on one scale), its interim values; and the TUI's own
meter of the target's process tree (CPU of the main process vs its children, resident memory).
The widget knows no probe: names and units come from what the probe declares (model.declared).
Block characters only: readable with NO_COLOR."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from fieldguide.frontends.tui.model import Line, label, reading_lines, sparkline

HISTORY = 120
MIN_LABEL = 10


class LiveReadings(Widget):
    DEFAULT_CSS = """
    LiveReadings { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.readings: dict[str, dict[str, Any]] = {}
        self.output: list[str] = []
        self.cpu_main: list[float] = []
        self.cpu_children: list[float] = []
        self.meter: tuple[float, float, int, float] | None = None
        self.headline = ""

    # -- data in (UI thread only) ----------------------------------------------------------------

    def reset(self, headline: str = "") -> None:
        self.readings, self.headline = {}, headline
        self.refresh(layout=True)

    def set_headline(self, text: str) -> None:
        self.headline = text
        self.refresh(layout=True)

    def update_readings(self, readings: dict[str, dict[str, Any]], output: list[str] | None = None) -> None:
        self.readings = readings
        if output is not None:
            self.output = output
        self.refresh(layout=True)

    def update_meter(self, main_pct: float | None, children_pct: float, children: int, rss_mib: float) -> None:
        if main_pct is None:
            self.meter = None
        else:
            self.meter = (main_pct, children_pct, children, rss_mib)
            self.cpu_main = (self.cpu_main + [main_pct])[-HISTORY:]
            self.cpu_children = (self.cpu_children + [children_pct])[-HISTORY:]
        self.refresh(layout=True)

    # -- drawing -----------------------------------------------------------------------------------

    def _current(self) -> tuple[str, dict[str, Any]]:
        if not self.readings:
            return "", {}
        probe = max(self.readings, key=lambda p: self.readings[p].get("_seq", 0))
        return probe, self.readings[probe]

    def _meter_lines(self, spark_w: int) -> list[Line]:
        if self.meter is None:
            return []
        main, children, n, rss = self.meter
        top = max(self.cpu_main + self.cpu_children + [100.0])
        return [Line("CPU main", sparkline(self.cpu_main, spark_w, top), "green", f" {main:3.0f}% RSS {rss:.0f} MB"),
                Line("children", sparkline(self.cpu_children, spark_w, top) if n else "none", "blue",
                     f" {children:3.0f}% of {n} proc" if n else "")]

    def render(self) -> Text:
        width = max(self.size.width, 30)
        out = Text()
        if self.headline:
            out.append(self.headline + "\n", style="bold")
        probe, reading = self._current()
        found = reading.get("series")
        names = [label(str(n)) for n in found] if isinstance(found, dict) else []
        label_w = max([MIN_LABEL] + [len(n) + 1 for n in names])
        spark_w = max(6, min(48, width - label_w - 24))
        lines: list[Line] = []
        values = ""
        if probe:
            lines, values = reading_lines(reading, spark_w)
            out.append(f"probe {probe}", style="bold yellow")
            if reading.get("status"):
                out.append(f"  {reading['status']}", style="dim")
            out.append("\n")
        elif self.output:
            out.append("job output:\n", style="dim")
            for text in self.output[-3:]:
                out.append(f"  | {text[: width - 4]}\n", style="dim")
        lines += self._meter_lines(spark_w)
        for line in lines:
            out.append(f"{line.label:<{label_w}}")
            out.append(line.drawing, style=line.style)
            out.append(line.suffix + "\n")
        if values:
            out.append(values + "\n", style="dim")
        if not out:
            out.append("waiting for the first reading…", style="dim")
        out.rstrip()
        return out
