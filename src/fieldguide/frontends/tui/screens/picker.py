"""The first screens: what to diagnose (a torch process, a command to launch, the bundled
demo), then which playbook to walk."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, OptionList, Static
from textual.widgets.data_table import ColumnKey
from textual.widgets.option_list import Option

from fieldguide.frontends.tui.dialogs.error import ErrorDialog
from fieldguide.frontends.tui.dialogs.launch import LaunchDialog
from fieldguide.frontends.tui.model import HEADER_ICON, TargetSpec
from fieldguide.frontends.tui.procscan import ProcInfo, Scanner, short_command
from fieldguide.frontends.tui.widgets.gpu import GpuPanel

if TYPE_CHECKING:
    from textual import getters

    from fieldguide.frontends.tui.app import FieldguideApp
    from fieldguide.playbook import Playbook

DEMO_NAME = "loader_remote_reads"  # fieldguide.workloads.DEMO, named here so the picker draws without importing it
DEMO_TEXT = f"the bundled demo: {DEMO_NAME}.py, a training loop that waits on slow reads"
RESCAN_SECONDS = 2.0


def _cmd_text(cmd: str, width: int) -> str:
    return cmd if len(cmd) <= width else cmd[: width - 1] + "…"


class TargetPicker(Screen[None]):
    HELP_SECTION = "Target picker"  # its keys first in the help
    if TYPE_CHECKING:
        app = getters.app(FieldguideApp)

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "demo", "Demo"),
        Binding("l", "launch", "Launch"),
        Binding("r", "rescan", "Rescan"),
    ]

    class Scanned(Message):
        def __init__(self, rows: list[ProcInfo], status: str) -> None:
            super().__init__()
            self.rows, self.status = rows, status

    def __init__(self, scanner: Scanner, *, rescan: bool = True) -> None:
        super().__init__()
        self.scanner = scanner
        self.rows: dict[int, ProcInfo] = {}
        self.rescan_timer = rescan
        self.scans = 0

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon=HEADER_ICON)
        with Vertical(id="picker"):
            yield Static("What should fieldguide diagnose?", classes="section-title")
            yield OptionList(Option(DEMO_TEXT, id="demo"),
                             Option("launch a command… (fieldguide starts it with its agent)", id="launch"),
                             id="picker-actions")
            yield Static("Running Python processes that use torch (and GPU processes)", classes="section-title")
            yield DataTable(id="procs", cursor_type="row", zebra_stripes=False)
            yield Static("scanning processes…", id="scan-status", classes="hint")
            yield GpuPanel(id="picker-gpus")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "pick a target"
        table = self.query_one("#procs", DataTable)
        table.add_column("PID", key="pid", width=7)
        table.add_column("USER", key="user", width=9)
        table.add_column("CPU%", key="cpu", width=6)
        table.add_column("RSS MB", key="rss", width=7)
        table.add_column("GPU MB", key="gpu", width=6)
        table.add_column("COMMAND", key="cmd")
        self.query_one("#picker-actions", OptionList).focus()
        self.action_rescan()
        if self.rescan_timer:
            self.set_interval(RESCAN_SECONDS, self.action_rescan)

    @work(thread=True, exclusive=True, group="scan", exit_on_error=False)
    def action_rescan(self) -> None:
        rows = self.scanner()
        self.post_message(self.Scanned(rows, str(getattr(self.scanner, "status", ""))))

    @on(Scanned)
    def scanned(self, event: Scanned) -> None:
        self.scans += 1
        self.rows = {r.pid: r for r in event.rows}
        self.fill_table()
        count = len(event.rows)
        found = f"{count} process{'es' if count != 1 else ''}" if count else (
            "no torch processes found: start your training job, or use the demo / launch a command")
        self.query_one("#scan-status", Static).update(" · ".join(t for t in (found, event.status) if t))

    def on_resize(self, event: events.Resize) -> None:
        self.fill_table()  # the command column takes the room the terminal has now, not at the last scan

    def fill_table(self) -> None:
        """The scanned processes, the command cut to the width left by the other columns; the
        row under the cursor stays under it."""
        table = self.query_one("#procs", DataTable)
        keep = None
        if table.row_count and table.cursor_row >= 0:
            try:
                keep = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            except Exception:
                keep = None
        table.clear()
        cmd_width = max(20, self.size.width - 54)
        column = table.columns[ColumnKey("cmd")]
        column.auto_width, column.width = False, cmd_width
        for r in self.rows.values():
            cmd = short_command(r.cmdline) + (f"  (+{r.torch_children} workers)" if r.torch_children else "")
            table.add_row(str(r.pid), r.user[:9], f"{r.cpu_percent:.0f}", f"{r.rss_mib:.0f}",
                          "" if r.gpu_mb is None else str(r.gpu_mb), _cmd_text(cmd, cmd_width), key=str(r.pid))
        if keep is not None and keep in {str(p) for p in self.rows}:
            table.move_cursor(row=table.get_row_index(keep))

    @on(DataTable.RowSelected, "#procs")
    def process_chosen(self, event: DataTable.RowSelected) -> None:
        pid = int(str(event.row_key.value))
        row = self.rows.get(pid)
        label = f"pid {pid}" + (f" · {_cmd_text(short_command(row.cmdline), 50)}" if row else "")
        self.app.push_screen(PlaybookPicker(TargetSpec(pid=pid, label=label)))

    @on(OptionList.OptionSelected, "#picker-actions")
    def action_chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id == "demo":
            self.action_demo()
        else:
            self.action_launch()

    def action_demo(self) -> None:
        from fieldguide.frontends.tui.demo import demo_spec

        self.app.push_screen(PlaybookPicker(demo_spec()))

    def action_launch(self) -> None:
        def launched(cmd: list[str] | None) -> None:
            if cmd:
                self.app.push_screen(PlaybookPicker(TargetSpec(cmd=tuple(cmd))))

        self.app.push_screen(LaunchDialog(), launched)


class PlaybookPicker(Screen[None]):
    if TYPE_CHECKING:
        app = getters.app(FieldguideApp)

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back")]

    def __init__(self, spec: TargetSpec) -> None:
        super().__init__()
        self.spec, self.preselect = spec, spec.playbook  # the playbook the target comes with, if any
        self.playbooks: dict[str, Playbook] = {}

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon=HEADER_ICON)
        with Vertical(id="picker"):
            yield Static(Text.assemble(("Target: ", "bold"), self.spec.describe()), id="picked-target")
            yield Static("Which playbook should it walk?", classes="section-title")
            yield OptionList(id="playbooks")
            yield Static("enter walks it · esc goes back", classes="hint")
        yield Footer()

    def on_mount(self) -> None:
        from fieldguide.errors import FieldguideError
        from fieldguide.playbook import list_playbooks

        self.sub_title = "pick a playbook"
        options = self.query_one("#playbooks", OptionList)
        problems: list[str] = []
        try:
            found = list_playbooks(problems)
        except FieldguideError as err:
            self.app.push_screen(ErrorDialog("A playbook does not load", str(err), fatal=True),
                                 lambda _: self.app.exit(2))
            return
        for problem in problems:  # a malformed playbook of the user's: skipped, and said so
            # markup=False: a problem quotes the file (`[unclosed`), which is not Textual markup.
            self.notify(problem, title="Skipped a malformed playbook", severity="warning", timeout=10,
                        markup=False)
        for pb in found:
            self.playbooks[pb.id] = pb
            options.add_option(Option(Text.assemble((pb.id, "bold"), "  ", (pb.title, "italic"), "\n",
                                                    (pb.purpose, "dim")), id=pb.id))
        if self.preselect in self.playbooks:
            options.highlighted = list(self.playbooks).index(self.preselect)
        elif found:
            options.highlighted = 0
        options.focus()

    @on(OptionList.OptionSelected, "#playbooks")
    def chosen(self, event: OptionList.OptionSelected) -> None:
        playbook = self.playbooks[str(event.option.id)]
        self.app.start_walk(self.spec, playbook)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.switch_screen(TargetPicker(self.app.scanner))
