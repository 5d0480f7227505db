"""Export the findings report to a path the user picks; never overwrite without asking."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from fieldguide.frontends.tui.driver import export_format
from fieldguide.frontends.tui.widgets.inputs import OrderedInput

if TYPE_CHECKING:
    from textual.screen import Screen

    from fieldguide.frontends.tui.app import FieldguideApp
    from fieldguide.frontends.tui.driver import WalkDriver

DEFAULT_PATH = "./fieldguide-report.json"
FORMAT_NAMES = {"json": "JSON", "md": "Markdown", "html": "HTML"}


class ExportDialog(ModalScreen["Path | None"]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str = DEFAULT_PATH, partial: bool = False) -> None:
        super().__init__()
        self.default, self.partial = default, partial

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box", classes="dialog"):
            yield Label("Export the findings report", classes="dialog-title")
            yield OrderedInput(self.default, id="export-path", placeholder=DEFAULT_PATH)
            yield Static("The format follows the suffix: .json, .md or .html.\nEnter writes it · Esc cancels.",
                         classes="hint")
            if self.partial:
                yield Static("The walk is not over: the report will say it is partial.", classes="warning")
            yield Static("", id="export-error", classes="error")

    @on(Input.Submitted, "#export-path")
    def submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            self._error("Type a path, e.g. ./fieldguide-report.json")
            return
        path = Path(text).expanduser()
        if export_format(path) is None:
            self._error(f"Use a .json, .md or .html suffix (got {path.suffix or 'none'})")
            return
        if path.is_dir():
            self._error(f"{path} is a directory")
            return
        self.dismiss(path)

    def _error(self, text: str) -> None:
        self.query_one("#export-error", Static).update(text)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmOverwrite(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Overwrite"),
        Binding("n,escape", "answer(False)", "Keep it"),
    ]

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Label("Overwrite?", classes="dialog-title")
            yield Static(f"{self.path} already exists.\nOverwrite it with this report?")
            with Horizontal(classes="buttons"):
                yield Button("Overwrite (y)", id="yes", variant="error")
                yield Button("Keep it (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


def start_export(screen: Screen[Any], driver: WalkDriver, on_written: Callable[[Path], None] | None = None) -> None:
    """Ask for a path, confirm an overwrite, then write in a thread worker and say where."""
    app = cast("FieldguideApp", screen.app)
    if driver.session is None:
        app.notify("Nothing to export yet: the target is still starting.", severity="warning")
        return
    default = app.export_default

    def write(path: Path) -> None:
        app.export_default = str(path)  # offered again next time

        def work() -> None:
            try:
                written, fmt, verdict = driver.export(path)
            except OSError as err:
                app.call_from_thread(app.notify, f"Could not write {path}: {err.strerror or err}",
                                     title="Export failed", severity="error")
                return
            app.call_from_thread(done, written, fmt, verdict)

        screen.run_worker(work, thread=True, group="export", exit_on_error=False)

    def done(written: Path, fmt: str, verdict: str) -> None:
        app.last_export = written
        files = getattr(driver, "exported_artifacts", None) or []
        folders = sorted({Path(a["path"]).parent.name + "/" for a in files})
        said = f"\n{len(files)} viewer file(s) in {', '.join(folders)} beside it" if files else ""
        app.notify(f"Wrote {written}\n{FORMAT_NAMES[fmt]} report, verdict: {verdict}{said}", title="Report exported",
                   timeout=8)
        if on_written is not None:
            on_written(written)

    def confirmed(path: Path, ok: bool | None) -> None:
        if ok:
            write(path)
        else:
            app.notify(f"Kept {path} as it was; nothing written.", title="Not exported")

    def chosen(path: Path | None) -> None:
        if path is None:
            return
        if path.exists():
            app.push_screen(ConfirmOverwrite(path), lambda ok: confirmed(path, ok))
        else:
            write(path)

    partial = not driver.session.walk.finished
    app.push_screen(ExportDialog(default, partial=partial), chosen)
