"""A failure the user can act on: the message, any detail lines, and where to go next."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ErrorDialog(ModalScreen[str]):
    """Dismisses with "back" (pick another target) or "quit"; "ok" where neither applies."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "choose('ok')", "Close"),
        Binding("b", "choose('back')", "Back"),
        Binding("q", "choose('quit')", "Quit"),
    ]

    def __init__(self, title: str, message: str, detail: list[str] | None = None, *, can_go_back: bool = False,
                 fatal: bool = False) -> None:
        super().__init__()
        self.title_text, self.message, self.detail = title, message, detail or []
        self.can_go_back, self.fatal = can_go_back, fatal

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box", classes="dialog"):
            yield Label(self.title_text, classes="dialog-title error")
            with VerticalScroll(id="error-body"):
                yield Static(self.message, markup=False)
                if self.detail:
                    yield Static("\n".join(f"| {line}" for line in self.detail[-12:]), classes="hint", markup=False)
            with Horizontal(classes="buttons"):
                if self.can_go_back:
                    yield Button("Pick another target (b)", id="back", variant="primary")
                if self.fatal or self.can_go_back:
                    yield Button("Quit (q)", id="quit", variant="error")
                else:
                    yield Button("OK", id="ok", variant="primary")

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "ok")

    def action_choose(self, choice: str) -> None:
        if choice == "back" and not self.can_go_back:
            return
        if choice == "ok" and (self.fatal or self.can_go_back):
            choice = "back" if self.can_go_back else "quit"
        self.dismiss(choice)
