"""Type a command for fieldguide to launch (with its agent loaded) and measure."""

from __future__ import annotations

import shlex
import shutil
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from fieldguide.frontends.tui.widgets.inputs import OrderedInput


class LaunchDialog(ModalScreen["list[str] | None"]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(id="launch-box", classes="dialog"):
            yield Label("Launch a command", classes="dialog-title")
            yield OrderedInput(placeholder="python train.py --epochs 1", id="launch-cmd")
            yield Static("fieldguide starts it with a small agent loaded (no edit to your script),\n"
                         "measures it, and ends it when you quit. Enter starts · Esc cancels.", classes="hint")
            yield Static("", id="launch-error", classes="error")

    @on(Input.Submitted, "#launch-cmd")
    def submitted(self, event: Input.Submitted) -> None:
        try:
            cmd = shlex.split(event.value)
        except ValueError as err:
            self.query_one("#launch-error", Static).update(f"Cannot parse the command: {err}")
            return
        if not cmd:
            self.query_one("#launch-error", Static).update("Type a command, e.g. python train.py")
            return
        if shutil.which(cmd[0]) is None:
            self.query_one("#launch-error", Static).update(f"Command not found: {cmd[0]}")
            return
        self.dismiss(cmd)

    def action_cancel(self) -> None:
        self.dismiss(None)
