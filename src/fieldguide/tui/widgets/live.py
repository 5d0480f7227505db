"""Live readings of the probe that is measuring: progress, per-step time and data wait,
CPU of the main process vs its workers, RSS. Block characters only: readable with NO_COLOR."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widget import Widget

from fieldguide.probes.stats import median
from fieldguide.tui.model import bar, sparkline

HISTORY = 120


class LiveReadings(Widget):
    DEFAULT_CSS = """
    LiveReadings { height: auto; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.readings: dict[str, dict[str, Any]] = {}
        self.output: list[str] = []
        self.cpu_main: list[float] = []
        self.cpu_workers: list[float] = []
        self.meter: tuple[float, float, int, float] | None = None
        self.rss: list[float] = []
        self.headline = ""

    # -- data in (UI thread only) ----------------------------------------------------------------

    def reset(self, headline: str = "") -> None:
        self.readings, self.rss, self.headline = {}, [], headline
        self.refresh(layout=True)

    def set_headline(self, text: str) -> None:
        self.headline = text
        self.refresh(layout=True)

    def update_readings(self, readings: dict[str, dict[str, Any]], output: list[str] | None = None) -> None:
        self.readings = readings
        if output is not None:
            self.output = output
        rss = readings.get("process.cpu", {}).get("rss_mb")
        if isinstance(rss, (int, float)):
            self.rss = (self.rss + [float(rss)])[-HISTORY:]
        self.refresh(layout=True)

    def update_meter(self, main_pct: float | None, workers_pct: float, workers: int, rss_mb: float) -> None:
        if main_pct is None:
            self.meter = None
        else:
            self.meter = (main_pct, workers_pct, workers, rss_mb)
            self.cpu_main = (self.cpu_main + [main_pct])[-HISTORY:]
            self.cpu_workers = (self.cpu_workers + [workers_pct])[-HISTORY:]
        self.refresh(layout=True)

    # -- drawing -----------------------------------------------------------------------------------

    def _current(self) -> tuple[str, dict[str, Any]]:
        if not self.readings:
            return "", {}
        probe = max(self.readings, key=lambda p: self.readings[p].get("_seq", 0))
        return probe, self.readings[probe]

    def render(self) -> Text:
        width = max(self.size.width, 30)
        label_w = 10
        out = Text()
        if self.headline:
            out.append(self.headline + "\n", style="bold")
        probe, reading = self._current()
        lines: list[tuple[str, str, str, str]] = []  # (label, series text, style, suffix)
        if probe:
            elapsed, of = reading.get("elapsed"), reading.get("of")
            step, wait = reading.get("step_ms") or [], reading.get("wait_ms") or []
            spark_w = max(6, min(48, width - label_w - 24))
            if isinstance(elapsed, (int, float)) and isinstance(of, (int, float)) and of > 0:
                lines.append(("progress", bar(elapsed / of, spark_w), "", f" {elapsed:4.1f}/{of:.0f} s"))
            if step:
                top = max(step + wait)
                med_s, med_w = median(step) or 0.0, median(wait) or 0.0
                lines.append(("step ms", sparkline(step, spark_w, top), "cyan", f" {med_s:.1f} median"))
                share = f" · {med_w / med_s:.0%} of step" if med_s and wait else ""
                lines.append(("wait ms", sparkline(wait, spark_w, top), "red", f" {med_w:.1f}{share}"))
            if self.rss:
                lines.append(("RSS MB", sparkline(self.rss, spark_w, max(self.rss)), "magenta", f" {self.rss[-1]:.0f} MB"))
            out.append(f"probe {probe}", style="bold yellow")
            if reading.get("status"):
                out.append(f"  {reading['status']}", style="dim")
            out.append("\n")
        elif self.output:
            out.append("job output:\n", style="dim")
            for line in self.output[-3:]:
                out.append(f"  | {line[: width - 4]}\n", style="dim")
        if self.meter is not None:
            main, workers, n, rss = self.meter
            spark_w = max(6, min(48, width - label_w - 24))
            top = max(self.cpu_main + self.cpu_workers + [100.0])
            lines.append(("CPU main", sparkline(self.cpu_main, spark_w, top), "green", f" {main:3.0f}% RSS {rss:.0f} MB"))
            lines.append(("workers", sparkline(self.cpu_workers, spark_w, top) if n else "none", "blue",
                          f" {workers:3.0f}% of {n} proc" if n else ""))
        for label, text, style, suffix in lines:
            out.append(f"{label:<{label_w}}")
            out.append(text, style=style)
            out.append(suffix + "\n")
        if not out:
            out.append("waiting for the first reading…", style="dim")
        out.rstrip()
        return out
