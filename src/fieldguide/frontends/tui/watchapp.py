"""`fieldguide watch` on a terminal: one screen, the sentinel's dashboard. Quitting stops the
watch (a walk under way is cancelled and its partial report written) and ends a launched job."""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType

from fieldguide.frontends.tui.screens.watch import WatchScreen


class WatchApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "fieldguide watch"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "shutdown", "Quit"),
        Binding("ctrl+c", "shutdown", "Quit", show=False, priority=True),
    ]

    def __init__(self, sentinel: Any, target: Any) -> None:
        super().__init__()
        self.sentinel, self.target = sentinel, target
        self.closing = False

    def on_mount(self) -> None:
        self.push_screen(WatchScreen(self.sentinel))

    def action_shutdown(self) -> None:
        if self.closing:
            return
        self.closing = True
        self.notify("Stopping the watch…", timeout=30)
        threading.Thread(target=self._stop_then_exit, name="fieldguide-watch-quit", daemon=True).start()

    def _stop_then_exit(self) -> None:
        try:
            self.sentinel.stop("quit by the user")
            self.target.close()
        finally:
            self.call_from_thread(self.exit, 1 if self.sentinel.departures else 0)


def run_watch_app(sentinel: Any, target: Any) -> int:
    import sys

    from fieldguide.watch.sentinel import EVENTS_FILE

    app = WatchApp(sentinel, target)
    try:
        app.run()
    finally:
        sentinel.stop("the dashboard closed")
        target.close()
    count = sentinel.departures
    print(f"fieldguide watch: {sentinel.ended}; {count} departure{'s' if count != 1 else ''}; events in "
          f"{sentinel.report_dir / EVENTS_FILE}", file=sys.stderr)
    return 1 if count else 0
