"""A line per GPU, refreshed by a thread worker that polls NVML again only after the last poll
returned (a slow driver call never piles up). Hidden where NVML cannot be used: the machine
has no GPU to show, and the report's environment says why."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.widgets import Static
from textual.worker import get_current_worker

from fieldguide.frontends.tui.model import gpu_line

POLL_SECONDS = 1.0


class GpuPanel(Static):
    DEFAULT_CSS = """
    GpuPanel { height: auto; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, *, module: Any | None = None, interval: float = POLL_SECONDS, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.module = module  # pynvml, or a constructed stand-in in tests
        self.interval = interval
        self.polls = 0
        self.reason: str | None = None

    def on_mount(self) -> None:
        self.display = False
        # After the first frame: loading pynvml and opening NVML (~80 ms here) would otherwise
        # hold the GIL while the screen is being drawn for the first time.
        self.call_after_refresh(self.run_worker, self.poll_loop, thread=True, exclusive=True, group="gpu-panel",
                                name="gpu panel")

    def poll_loop(self) -> None:
        from fieldguide.host.gpuwindow import GpuPoller

        worker = get_current_worker()
        poller = GpuPoller(self.module if self.module is not None else getattr(self.app, "nvml_module", None))
        try:
            while not worker.is_cancelled:
                rows, reason = poller.poll()
                if worker.is_cancelled:
                    break
                self.app.call_from_thread(self.show, rows, reason)
                if reason is not None:
                    return  # no NVML here: it will not appear mid-session
                deadline = time.monotonic() + self.interval
                while time.monotonic() < deadline and not worker.is_cancelled:
                    time.sleep(0.05)
        finally:
            poller.close()

    def show(self, rows: list[dict[str, Any]], reason: str | None) -> None:
        self.polls += 1
        self.reason = reason
        self.display = bool(rows)
        if rows:
            text = Text()
            for i, row in enumerate(rows):
                line, style = gpu_line(row)
                text.append(("\n" if i else "") + line, style=style)
            self.update(text)
