"""Every key, by screen, and what the tree's glyphs mean. Keyboard only; no mouse needed. The
keys of the screen `?` was pressed on come first (a screen's HELP_SECTION names its section)."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from fieldguide.frontends.tui.model import CAUSE_GLYPH, CAUSE_REACHED_GLYPH, LEAF_GLYPH
from fieldguide.report.vocabulary import GLYPH, STYLE

KEYS: list[tuple[str, list[tuple[str, str]]]] = [
    ("Everywhere", [("? / h", "this help"), ("q / ctrl+c", "quit (a launched job is ended, an attached one is left alone)"),
                    ("tab / shift+tab", "move between panes"), ("↑ ↓ pgup pgdn", "move, scroll")]),
    ("Target picker", [("enter", "diagnose the process under the cursor"), ("d", "the bundled demo"),
                       ("l", "launch a command"), ("r", "rescan processes")]),
    ("Walk", [("n", "next: measure the current node (manual step)"), ("a", "auto-walk on / paused"),
              ("enter", "jump to the node under the cursor and measure it"),
              ("r", "re-run the node under the cursor (fresh measurement)"),
              ("d", "show the departure"), ("m", "re-measure the departure (check a fix)"),
              ("e", "export the findings report"), ("esc", "back to the walk of the whole job (from one rank's)")]),
    ("Departure", [("m", "re-measure: a launched job is started afresh first"),
                   ("t", "try the fix: relaunch the job with the cause's fix applied and time both, in turns"),
                   ("n", "the departed node's other raw readings"),
                   ("e", "export the report"), ("esc / w", "back to the walk")]),
    ("Watch (fieldguide watch)", [("enter", "open the event under the cursor (a departure's page)"),
                                  ("esc / w", "back to the dashboard"),
                                  ("q", "stop the watch (a walk under way writes its partial report)")]),
]


def ordered(first: str | None) -> list[tuple[str, list[tuple[str, str]]]]:
    """KEYS with the `first` section at the top, then "Everywhere", then the others as listed."""
    rank = {first: 0, "Everywhere": 1}
    return sorted(KEYS, key=lambda section: rank.get(section[0], 2))


def help_table(first: str | None = None) -> Table:
    table = Table(box=None, padding=(0, 1), show_header=False, expand=True)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(ratio=1)
    for section, keys in ordered(first):
        table.add_row(Text(section, style="bold underline"), "")
        for key, what in keys:
            table.add_row(key, what)
    table.add_row("", "")
    legend = Text()
    for state, glyph in GLYPH.items():
        legend.append(glyph, style=STYLE[state])
        legend.append(f" {state}  ")
    table.add_row(Text("Tree", style="bold underline"), legend)
    table.add_row("", Text(f"{CAUSE_GLYPH} a cause it can name ({CAUSE_REACHED_GLYPH} named)  "
                           f"{LEAF_GLYPH} a healthy leaf"))
    table.add_row("", "A node's next line is where it leads when it passes; the lines nested under "
                      "it, where it leads when it departs.")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close help"),
    ]

    def __init__(self, first: str | None = None) -> None:
        super().__init__()
        self.first = first  # the section of the screen `?` was pressed on

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box", classes="dialog"):
            yield Label("fieldguide keys  (esc closes)", classes="dialog-title")
            with VerticalScroll(id="help-body"):
                yield Static(help_table(self.first))

    def on_mount(self) -> None:
        self.query_one("#help-body").focus()

    def action_close(self) -> None:
        self.dismiss(None)
