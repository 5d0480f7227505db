"""Try the fix from the departure page: the job relaunched with the cause's fix applied, timed
against itself in turns (fieldguide/experiments/tryfix.py) on a thread worker; the arms drawn as they come,
then the table of arms and the verdict. Leaving the page cancels it (the arms are ended, the job
resumed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual import work
from textual.widgets import Static
from textual.worker import get_current_worker

from fieldguide.frontends.tui.model import sparkline
from fieldguide.report.charts import arm_bars
from fieldguide.report.summary import experiment_renderables

if TYPE_CHECKING:
    from fieldguide.frontends.tui.driver import WalkDriver


class TryFixPanel(Static):
    DEFAULT_CSS = """
    TryFixPanel { height: auto; padding: 1 0 0 0; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.running = False
        self.result: dict[str, Any] | None = None

    def on_mount(self) -> None:
        self.display = False

    def start(self, driver: WalkDriver) -> None:
        self.running, self.result, self.display = True, None, True
        self.update(Text("Trying the fix: relaunching the job with it…", style="bold"))
        self.call_after_refresh(self.scroll_visible)  # the answer shows where the user is looking
        self._run(driver)

    @work(thread=True, exclusive=True, group="try-fix", exit_on_error=False)
    def _run(self, driver: WalkDriver) -> None:
        worker = get_current_worker()
        try:
            result = driver.try_fix(progress=lambda status, series: self.app.call_from_thread(
                self.show_progress, status, series), cancelled=lambda: worker.is_cancelled)
        except Exception as err:  # never an unhandled error in the app: say it here
            result = {"cause": "", "ran": False, "why": f"{type(err).__name__}: {err}"}
        if not worker.is_cancelled:
            self.app.call_from_thread(self.show_result, result)

    def show_progress(self, status: str, series: dict[str, list[float]]) -> None:
        """Each arm by its change (`num_workers=4`), its steps so far as a sparkline, the last one's ms."""
        lines: list[RenderableType] = [Text(f"Trying the fix: {status}", style="bold")]
        name_w = min(max((len(name) for name in series), default=0), ARM_LABEL) + 1
        width = max(16, min(40, (self.size.width or 78) - name_w - 12))
        for name, values in series.items():
            if values:
                shown = name if len(name) < name_w else name[:name_w - 2] + "…"
                lines.append(Text.assemble((f"{shown:<{name_w}}", "bold"),
                                           (sparkline(values, width), "cyan"), f" {values[-1]:.3g} ms"))
        self.update(Group(*lines))

    def show_result(self, result: dict[str, Any]) -> None:
        self.running, self.result = False, result
        self.update(Group(*experiment_renderables([result]), *arm_lines(result, self.size.width or 78)))
        self.call_after_refresh(self.scroll_visible)


ARM_LABEL = 16  # columns for an arm's name; the table above has it whole


def arm_lines(result: dict[str, Any], width: int) -> list[Text]:
    """The arms as bars on one scale: a block per share of the longest, the median's length,
    then a thin line on to the third quartile (the spread), and the median in ms."""
    bars = [b for b in arm_bars(result) if b.value is not None]
    if not bars:
        return []
    top = max(max(b.value or 0.0, b.high or 0.0) for b in bars) or 1.0
    name_w = min(max(len(b.label) for b in bars), ARM_LABEL) + 1
    room = max(8, width - name_w - 10)
    lines = [Text(""), Text("ms per step (median, ─ on to the third quartile)", style="bold")]
    for i, b in enumerate(bars):
        median, reach = round((b.value or 0.0) / top * room), round(max(b.value or 0.0, b.high or 0.0) / top * room)
        name = b.label if len(b.label) < name_w else b.label[:name_w - 2] + "…"
        lines.append(Text.assemble((f"{name:<{name_w}}", "bold"), ("█" * median, "dim" if i == 0 else "cyan"),
                                   ("─" * (reach - median), "dim"), f" {b.value:.3g}"))
    return lines
