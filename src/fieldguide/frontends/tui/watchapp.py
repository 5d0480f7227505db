"""`fieldguide watch` on a terminal: one screen, the sentinel's dashboard. Quitting stops the
watch (a walk under way is cancelled and its partial report written) and ends a launched job.

The sentinel runs on a plain daemon thread, not a Textual worker: Textual waits for its workers
on exit, and a watch runs until it is told to stop."""

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
        Binding("question_mark,h", "help", "Help", key_display="?"),
    ]

    def __init__(self, sentinel: Any, target: Any) -> None:
        super().__init__()
        self.sentinel, self.target = sentinel, target
        self.closing = False
        self.thread = threading.Thread(target=self._watch, name="fieldguide-sentinel", daemon=True)

    def on_mount(self) -> None:
        screen = WatchScreen(self.sentinel)
        self.push_screen(screen)
        self.call_after_refresh(self.thread.start)  # once the screen listens for events

    def _watch(self) -> None:
        from fieldguide.frontends.tui.screens.watch import WatchEnded

        try:
            self.sentinel.run()
        finally:
            # From this thread, and perhaps after the app has gone (q, then the sentinel's last
            # walk ends): the stack, not `self.screen`, which raises once no screen is left.
            for screen in list(self.screen_stack) if self.is_running else []:
                if isinstance(screen, WatchScreen):
                    screen.post_message(WatchEnded())
        # A watch given --duration is a bounded run (a script, a tmux job): it returns by itself,
        # with its events' exit status. Without one, the ended dashboard stays until `q`.
        if self.sentinel.duration is not None and not self.closing and self.is_running:
            self.closing = True
            self.target.close()
            self.call_from_thread(self.exit, self.sentinel.exit_status)

    def action_help(self) -> None:
        from fieldguide.frontends.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(getattr(self.screen, "HELP_SECTION", None)))

    async def action_quit(self) -> None:  # ctrl+q, and anything else that asks the app to quit
        self.action_shutdown()

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
            self.call_from_thread(self.exit, self.sentinel.exit_status)


def run_watch_app(sentinel: Any, target: Any) -> int:
    import sys

    from fieldguide.watch.sentinel import EVENTS_FILE

    app = WatchApp(sentinel, target)
    try:
        app.run()
    finally:
        sentinel.stop("the dashboard closed")
        if app.thread.is_alive():
            app.thread.join(timeout=30)  # the source's samplers stopped before the process leaves
        target.close()
    count = sentinel.departures
    print(f"fieldguide watch: {sentinel.ended}; {count} departure{'s' if count != 1 else ''}; events in "
          f"{sentinel.report_dir / EVENTS_FILE}", file=sys.stderr)
    return int(sentinel.exit_status)
