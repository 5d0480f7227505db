"""A walk without the TUI: progress lines on stderr, the summary on stdout, the report on disk.

The walk runs on its own thread and the main thread only waits. Python delivers Ctrl-C, SIGTERM
and SIGHUP (cli._Interrupts) to the main thread as an exception raised wherever it happens to be:
inside a probe that is in the middle of a lock hand-over (Condition.wait re-acquiring its lock),
such an exception corrupts the lock and can hang the walk. A main thread that only waits on an
Event holds no lock when it is interrupted; it cancels the walk and lets it unwind."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldguide.errors import EXIT_FOR_VERDICT, EXIT_INTERRUPTED, FieldguideError
from fieldguide.frontends.progress import WalkProgress

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.text import Text

    from fieldguide.report.findings import Findings
    from fieldguide.walk.session import Session

# After a cancel, how long the walk may take to stop measuring before the job is ended anyway:
# every probe checks the cancel at least every 0.2 s; a stuck one must not keep the job running.
UNWIND_S = 10.0


def check_writable(path: Path) -> None:
    """A report path that cannot be written fails now, not after a minute of measuring."""
    from fieldguide.safewrite import refusal

    parent = path.parent if str(path.parent) else Path(".")
    why = refusal(path)
    if why is not None:
        raise FieldguideError(f"--report {why}")
    if not parent.is_dir():
        raise FieldguideError(f"--report {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise FieldguideError(f"--report {path} is not writable")


def diagnose_headless(playbook_id: str, pid: int | None, cmd: list[str], report: Path | None,
                      fmt: str | None, budget: float | None, *, show_output: bool, try_fix: bool = False,
                      json_out: bool = False, extra_arm: tuple[str, ...] = (), on_interrupt: Any = None) -> int:
    """Walk, print the summary, write the report. With `json_out` (or `--report -`) stdout holds the
    report alone, for a script to read, and the summary goes to stderr. `extra_arm`: capabilities
    the user arms in a launched job beside the playbook's (--memory-history)."""
    import math

    from fieldguide.playbook import find_playbook
    from fieldguide.report import consoles, write_report
    from fieldguide.report.render import format_for, is_stdout, render
    from fieldguide.report.summary import summary_renderables
    from fieldguide.report.terminal import print_renderables
    from fieldguide.walk.session import Session, launch_arm, launch_env, open_target

    playbook = find_playbook(playbook_id)  # bad playbooks and report paths fail before anything starts
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise FieldguideError("--budget must be a positive number of seconds")
    stdout_format = "json" if json_out else None
    if report is not None and is_stdout(report):
        stdout_format, report = fmt or "json", None
    if report is not None:
        from fieldguide.report.merge import expand_report_path

        try:
            fmt = format_for(report, fmt)
        except ValueError as why:
            raise FieldguideError(f"--report {report}: {why}") from None
        report = expand_report_path(report)  # %h: this node's host name (one report per node)
        check_writable(report)
    if on_interrupt is not None:
        signal.signal(signal.SIGINT, on_interrupt)  # a second Ctrl-C must not cut ending the job short
    err = consoles.console(stderr=True)
    echo = (lambda line: print(f"  | {line}", file=sys.stderr)) if show_output else None
    interrupted = False
    target = None
    try:
        target = open_target(pid, cmd, echo=echo, arm=launch_arm(playbook, extra_arm),
                             extra_env=launch_env(playbook, report))
        progress = WalkProgress(err)
        session = Session(playbook, target, budget=budget or 0.0, on_reading=progress.offer)
        err.print(header_line(playbook.id, target.kind, target.pid if pid else None, cmd))
        findings, interrupted = walk_off_main_thread(session, err, try_fix=try_fix, progress=progress)
    finally:
        if on_interrupt is not None and hasattr(on_interrupt, "walk_over"):
            on_interrupt.walk_over()
        if target is not None:
            target.close()
    if report is not None:  # the summary lists the files for viewers where the report keeps them
        from fieldguide.report.artifacts import place

        findings = place(findings, report)
    print_renderables(consoles.console(stderr=stdout_format is not None), summary_renderables(findings))
    if stdout_format is not None:
        sys.stdout.write(render(findings, stdout_format))
        sys.stdout.flush()
    if report is not None:
        try:
            path = write_report(findings, report, fmt)
        except OSError as failure:
            raise FieldguideError(f"cannot write the report to {report}: {failure.strerror or failure}") from None
        err.print(f"report written to {path}")
        runner = getattr(session, "runner", None)
        if runner is not None:  # its files are beside the report now: no copy left in /tmp
            runner.discard_artifacts()
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FOR_VERDICT[findings.verdict]


def header_line(playbook_id: str, kind: str, pid: int | None, cmd: list[str]) -> Text:
    """The walk's first line on stderr: the target's command line redacted (its arguments may hold
    a token), and as plain text: a `[...]` in it is no Rich markup, a `:name:` no emoji."""
    from rich.text import Text

    from fieldguide.report.redact import redact_argv

    where = f"pid {pid}" if pid is not None else " ".join(redact_argv([str(a) for a in cmd])) or "machine"
    return Text.assemble(("fieldguide", "bold"), f" {playbook_id} on {kind} {where}")


def walk_off_main_thread(session: Session, err: Console, *, try_fix: bool = False,
                         unwind_s: float = UNWIND_S, progress: WalkProgress | None = None) -> tuple[Findings, bool]:
    """Walk (and try the fix) on a thread; the findings, and whether the user interrupted. The
    main thread shows the walk's progress while it waits.

    An error the walk raised (the target could not be measured at all) is raised here."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def walk() -> None:
        try:
            findings = session.run(lambda result: err.print(
                ProgressLine(result.node, result.status, result.seconds, result.note)))
            if try_fix and findings.first_departure and not session.runner.cancelled.is_set():
                findings.experiments.append(try_fix_of(session, findings.first_departure["cause"], err))
            outcome["findings"] = findings
        except BaseException as failure:  # handed to the main thread, which reports it
            outcome["error"] = failure
        finally:
            done.set()

    threading.Thread(target=walk, name="fieldguide-walk", daemon=True).start()
    try:
        while not done.wait(0.2):
            if progress is not None:
                progress.tick(session)
    except KeyboardInterrupt as interrupt:
        current = session.walk.current or "start"
        # Ctrl-C raises a bare KeyboardInterrupt; SIGTERM and SIGHUP (cli._Interrupts) carry their name.
        how = f"by {interrupt.args[0]}" if interrupt.args else "by the user (Ctrl-C)"
        if session.walk.finished:  # every node was walked: the report is whole, only its writing was cut into
            session.cancel(f"interrupted {how} after the walk ended; the report is complete")
        else:
            session.cancel(f"interrupted {how} at node {current}; the report is partial")
        done.wait(unwind_s)
        return session.findings(), True
    finally:
        if progress is not None:
            progress.stop()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["findings"], False


def try_fix_of(session: Session, cause_id: str, err: Console) -> dict[str, Any]:
    """Relaunch the job with the cause's fix and time the arms (fieldguide/experiments/tryfix.py)."""
    from fieldguide.experiments.tryfix import try_fix
    from fieldguide.targets import LaunchTarget

    cause = session.playbook.causes[cause_id]
    if not isinstance(session.target, LaunchTarget):
        return {"cause": cause_id, "ran": False, "why": "only a launched job can be relaunched"}
    err.print(f"[bold]trying the fix of {cause_id}[/]: relaunching the job with it, timing the arms in turns")
    return try_fix(session.target, cause, cancelled=session.runner.cancelled.is_set,
                   progress=lambda status, series: err.print(f"  {status}", style="dim"))


class ProgressLine:
    """One node's line on stderr during a headless walk. The whole note is shown: a long one
    wraps, indented under the note's start, instead of being cut (its reason is often at the
    end); on a console too narrow for that, it goes under the line, indented by four."""

    NOTE_MIN = 24  # fewer columns than this beside the line: the note goes under it

    def __init__(self, node: str, status: str, seconds: float, note: str):
        self.head = f"  {node:<24} {status:<7} {seconds:5.1f} s  "
        self.short_head = f"  {node} {status} {seconds:.1f} s"  # for a narrow console
        self.note = note

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.padding import Padding
        from rich.table import Table
        from rich.text import Text

        note = Text(self.note, style="dim", overflow="fold")  # words wrap; a longer word (a path) folds
        if options.max_width - len(self.head) >= (self.NOTE_MIN if self.note else 0):
            line = Table.grid()
            line.add_column(no_wrap=True)
            line.add_column(overflow="fold")
            line.add_row(Text(self.head), note)
            yield line
        else:
            yield Text(self.short_head, overflow="fold")
            if self.note:
                yield Padding(note, (0, 0, 0, 4))
