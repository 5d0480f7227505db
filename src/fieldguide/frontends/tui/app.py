"""The fieldguide app and its one factory, `make_app`, shared by the CLI, the tests and the
screenshot script: what is tested is what ships. Screens, widgets and dialogs live beside it."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from textual import on
from textual.app import App
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen

from fieldguide.frontends.tui.dialogs.export import DEFAULT_PATH
from fieldguide.frontends.tui.driver import SessionFactory, WalkDriver, is_launched, real_session
from fieldguide.frontends.tui.messages import ExportRequested, RemeasureRequested
from fieldguide.frontends.tui.model import TargetSpec
from fieldguide.frontends.tui.procscan import ProcessScanner, Scanner
from fieldguide.frontends.tui.screens.help import HelpScreen

if TYPE_CHECKING:
    from fieldguide.playbook import Playbook
    from fieldguide.targets import Target

from fieldguide.errors import EXIT_FOR_VERDICT, EXIT_INTERRUPTED

S = TypeVar("S", bound=Screen[None])


class FieldguideApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "fieldguide"
    ENABLE_COMMAND_PALETTE = False
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "shutdown", "Quit"),
        Binding("ctrl+c", "shutdown", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("h", "help", "Help", show=False),
    ]

    def __init__(self, *, spec: TargetSpec | None, playbook: Playbook | None, scanner: Scanner,
                 factory: SessionFactory, auto: bool = True, export_default: str = DEFAULT_PATH) -> None:
        super().__init__()
        self.spec, self.playbook, self.scanner, self.factory = spec, playbook, scanner, factory
        self.auto, self.export_default = auto, export_default
        self.nvml_module: Any = None  # the GPU panels' NVML: pynvml, or a constructed one in tests
        self.verdict: str | None = None  # set when a walk ends
        self.exit_hint: int | None = None  # a target that could not be measured
        self.closing = False
        self.last_export: Path | None = None
        self.drivers: list[WalkDriver] = []
        self._targets: list[Target] = []
        self._lock = threading.Lock()

    def on_mount(self) -> None:
        # Each first screen imports its own module: a walk's first frame waits for no picker.
        if self.spec is None:
            from fieldguide.frontends.tui.screens.picker import TargetPicker

            self.push_screen(TargetPicker(self.scanner))
        elif self.playbook is None:
            from fieldguide.frontends.tui.screens.picker import PlaybookPicker

            self.push_screen(PlaybookPicker(self.spec))
        else:
            self.start_walk(self.spec, self.playbook)

    def start_walk(self, spec: TargetSpec, playbook: Playbook) -> None:
        from fieldguide.frontends.tui.screens.walk import WalkScreen

        screen = WalkScreen(spec, playbook, self.factory, auto=self.auto)
        picker = sys.modules.get("fieldguide.frontends.tui.screens.picker")  # not imported for a walk opened directly
        if picker is not None and isinstance(self.screen, picker.PlaybookPicker):
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    def back_to_picker(self) -> None:
        """After a target failed: end what was launched (in a thread) and pick again."""
        from fieldguide.frontends.tui.screens.picker import TargetPicker

        self.run_worker(self.close_targets, thread=True, group="close", exit_on_error=False)
        self.switch_screen(TargetPicker(self.scanner))

    # -- routing between screens: they hold no reference to each other --------------------------------

    def showing(self, screen_type: type[S]) -> S | None:
        """The topmost screen of this type on the stack, if any."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, screen_type):
                return screen
        return None

    def route(self, message: Message) -> None:
        """What the walk has for the departure screen (live readings, the re-measure): posted
        to it if it is open, else dropped (it reads the walk's state when it opens)."""
        from fieldguide.frontends.tui.screens.departure import DepartureScreen

        departure = self.showing(DepartureScreen)
        if departure is not None:
            departure.post_message(message)

    @on(RemeasureRequested)
    def remeasure_requested(self) -> None:
        from fieldguide.frontends.tui.screens.walk import WalkScreen

        walk = self.showing(WalkScreen)
        if walk is not None:
            walk.action_remeasure()

    @on(ExportRequested)
    def export_requested(self) -> None:
        from fieldguide.frontends.tui.screens.walk import WalkScreen

        walk = self.showing(WalkScreen)
        if walk is not None:
            walk.action_export()

    # -- targets: every one opened is tracked, so that quitting can end the launched ones --------

    def track_target(self, target: Target) -> None:
        """Called from the worker that opened it."""
        with self._lock:
            self._targets.append(target)
        if self.closing and is_launched(target):
            self.close_targets()

    def close_targets(self) -> None:
        """End every launched job. Never touches an attached process. Blocks until each is ended,
        also one whose closing another thread began (LaunchTarget.close waits for it)."""
        with self._lock:
            todo = [t for t in self._targets if is_launched(t)]
        for target in todo:
            target.close()

    def launched_pids(self) -> list[int]:
        with self._lock:
            return [t.popen.pid for t in self._targets  # type: ignore[attr-defined]
                    if is_launched(t) and t.popen.poll() is None]  # type: ignore[attr-defined]

    # -- quitting ----------------------------------------------------------------------------------

    def action_shutdown(self) -> None:
        if self.closing:
            self.notify("Still ending the launched job…")
            return
        self.closing = True
        for driver in self.drivers:
            walk = driver.session.walk if driver.session is not None else None
            where = walk.current if walk is not None else "start"
            unfinished = walk is None or not walk.finished
            driver.cancel(f"quit by the user at node {where}; the report is partial" if unfinished else "")
        pids = self.launched_pids()
        if not pids:
            self.exit(self.exit_code())
            return
        self.notify(f"Ending the launched job (pid {', '.join(map(str, pids))})…", title="Quitting", timeout=30)
        self.run_worker(self._close_then_exit, thread=True, group="close", exit_on_error=False)

    def _close_then_exit(self) -> None:
        try:
            self.close_targets()
        finally:
            self.call_from_thread(self.exit, self.exit_code())

    async def action_quit(self) -> None:  # ctrl+q, and anything else that asks the app to quit
        self.action_shutdown()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(getattr(self.screen, "HELP_SECTION", None)))

    def farewell(self) -> str:
        """One line for the shell once the TUI is gone: the verdict and its cause, and where the
        report went, or that it was not exported (what the user quit with stays on the screen)."""
        walks = [d.session.walk for d in self.drivers if d.session is not None]
        if not walks:
            return "fieldguide: no walk started"
        walk = walks[0]
        if walk.finished:
            said = walk.verdict + (f": {walk.departure.cause.id}" if walk.departure is not None else
                                   f" ({walk.conclusion})" if walk.conclusion else "")
        else:
            said = f"quit mid-walk at node {walk.current}"
        page = "the departure page" if walk.finished and walk.departure is not None else "the walk's end"
        where = (f"report: {self.last_export}" if self.last_export is not None else
                 f"report not exported (e on {page}, or `fieldguide diagnose --report PATH`)")
        return f"fieldguide {walk.playbook.id}: {said}; {where}"

    def exit_code(self) -> int:
        if self.verdict is not None:
            return EXIT_FOR_VERDICT[self.verdict]
        if self.exit_hint is not None:
            return self.exit_hint
        return EXIT_INTERRUPTED if self.drivers else 0


def make_app(pid: int | None = None, cmd: list[str] | None = None, playbook_id: str | None = None,
             demo: bool = False, *, extra_arm: tuple[str, ...] = (), scanner: Scanner | None = None, session_factory: SessionFactory | None = None,
             auto: bool = True, export_default: str = DEFAULT_PATH) -> FieldguideApp:
    """The app, configured as the CLI would: no target opens the picker; a target (pid, command,
    or the demo) skips it; a playbook id skips the playbook picker too (the demo: the playbook
    its spec comes with, see tui/demo.py)."""
    spec: TargetSpec | None = None
    if demo:
        from fieldguide.frontends.tui.demo import demo_spec

        spec = demo_spec(playbook_id, cmd)
        playbook_id = spec.playbook
    elif pid is not None:
        spec = TargetSpec(pid=pid)
    elif cmd:
        spec = TargetSpec(cmd=tuple(cmd), arm=extra_arm)
    playbook = None
    if playbook_id:
        from fieldguide.playbook import find_playbook

        playbook = find_playbook(playbook_id, trust_bundled=True)  # a bad id fails here, before any screen is drawn
    return FieldguideApp(spec=spec, playbook=playbook, scanner=scanner or ProcessScanner(),
                         factory=session_factory or real_session, auto=auto, export_default=export_default)


def run_app(pid: int | None = None, cmd: list[str] | None = None, playbook_id: str | None = None,
            demo: bool = False, extra_arm: tuple[str, ...] = ()) -> int:
    """Run the TUI; returns the exit status (0 clean, 1 departure, 3 inconclusive, 130 quit mid-walk)."""
    app = make_app(pid=pid, cmd=cmd, playbook_id=playbook_id, demo=demo, extra_arm=extra_arm)
    try:
        app.run()
    finally:
        app.close_targets()  # whatever happened, a launched job does not outlive fieldguide

    print(app.farewell(), file=sys.stderr)
    return app.exit_code()
