"""The command line. Imports nothing heavy: torch, textual, pynvml and psutil load only where used."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from fieldguide import __version__
from fieldguide.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, FieldguideError

MEMORY_HISTORY = "memory:history"  # the agent's memory capability, recording CUDA allocations from the start


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line and exit 2, as for any bad input
        self.exit(EXIT_BAD_INPUT, f"fieldguide: error: {message}\n")


DIAGNOSE_EPILOG = """\
examples:
  fieldguide diagnose --playbook slow-training -- python train.py --lr 3e-4
  fieldguide diagnose --playbook slow-training -- torchrun --nproc-per-node 4 train.py
  fieldguide diagnose --playbook slow-training --pid 4242 --report findings.html
  fieldguide diagnose --playbook slow-training --json -- python train.py | jq .verdict
  fieldguide diagnose --playbook oom --try-fix -- python train.py
  fieldguide diagnose --playbook oom --memory-history --report oom.html -- python train.py
  fieldguide diagnose --playbook node-check --local
  fieldguide diagnose --playbook slow-training --report 'reports/%h.json' -- torchrun --nnodes 2 ... train.py

exit status:
  0    clean: the walk reached a healthy leaf
  1    departure: a node's measurement departed from its expectation (the report names the cause)
  2    bad usage or input (unknown playbook, no such pid, not Python, ptrace not permitted)
  3    could not measure what the walk needed (inconclusive)
  130  interrupted: a launched job is still ended and the partial report written

environment:
  FIELDGUIDE_PLAYBOOKS   a directory of your own playbooks (YAML), beside the bundled ones
  FIELDGUIDE_DEMO_PYTHON the Python (with torch) that runs `fieldguide demo`'s job
  XDG_CACHE_HOME         where `fieldguide calibrate` keeps this machine's calibration
  NO_COLOR               no colour in the summary and the progress line
"""


WATCH_EPILOG = """\
examples:
  fieldguide watch -- python train.py
  fieldguide watch --pid 4242 --report-dir runs/watch --duration 14400
  fieldguide watch --no-tui -- torchrun --nproc-per-node 8 train.py | tee watch.log

The job's baseline is learned once it trains; a signal that departs from it for long enough
(step time, input share, memory growth, GPU and SM busy: watch.yaml) starts its playbook's walk, whose
report goes to the directory. Every event is a line of DIR/events.jsonl.

exit status:
  0    the job never departed from its baseline
  1    it departed at least once (each walk's report names the cause)
  2    bad usage or input
"""


class _DiagnoseHelp(argparse.RawDescriptionHelpFormatter):
    """The epilog as written, and each installed playbook's own --budget default, read when the
    help is asked for (never on a normal start)."""

    def format_help(self) -> str:
        from fieldguide.playbook import list_playbooks
        from fieldguide.walk.session import DEFAULT_BUDGET

        budgets = "".join(f"  {p.id:<22} {p.budget or DEFAULT_BUDGET:.0f} s\n" for p in list_playbooks([]))
        return super().format_help() + "\n--budget default, by playbook:\n" + budgets


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fieldguide", description=(
        "A field guide for slow PyTorch training jobs: walks a diagnostic playbook, measuring the real job "
        "at every node, and stops at the first place where measurement departs from expectation."),
        epilog="With no command, opens the TUI (target picker). `fieldguide -- CMD` or `--pid N` opens it on a target. "
               "`fieldguide diagnose --help` has examples, the exit status and the environment variables.")
    parser.add_argument("--version", action="version", version=f"fieldguide {__version__}")
    parser.add_argument("--pid", type=int, help="(TUI) attach to a running process")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    demo = sub.add_parser("demo", help="slow-training on a bundled faulty workload (TUI, or headless with --no-tui)")
    demo.add_argument("--no-tui", action="store_true", help="walk headlessly and print a summary")
    demo.add_argument("--report", type=Path, help="write the findings report here")
    demo.add_argument("--format", choices=("json", "md", "html"))
    demo.add_argument("--budget", type=float)
    demo.add_argument("--json", action="store_true", help="print the JSON report alone on stdout (summary on stderr)")

    diag = sub.add_parser("diagnose", help="walk a playbook against a pid or a launched command",
                          usage="fieldguide diagnose --playbook ID (--pid PID | -- CMD [ARGS...] | --local) [--report PATH] "
                                "[--json] [--format json|md|html] [--budget SECONDS] [--no-tui] [--try-fix] [--memory-history]",
                          epilog=DIAGNOSE_EPILOG, formatter_class=_DiagnoseHelp)
    diag.add_argument("--playbook", required=True, help="playbook id (see `fieldguide playbooks`) or a .yaml path")
    diag.add_argument("--pid", type=int, help="attach to this running process (never stopped or killed)")
    diag.add_argument("--local", action="store_true",
                      help="no process: measure this machine (--playbook node-check: is it fit to train?)")
    diag.add_argument("--report", type=Path, help="write the findings report here (`-`: stdout)")
    diag.add_argument("--json", action="store_true",
                      help="print the JSON report alone on stdout, the summary on stderr (with --report, both)")
    diag.add_argument("--format", choices=("json", "md", "html"), help="report format (default: from the suffix)")
    diag.add_argument("--budget", type=float, help="most seconds of measurement (default: the playbook's own, below)")
    diag.add_argument("--no-tui", action="store_true", help="walk headlessly even on a terminal")
    diag.add_argument("--show-output", action="store_true", help="pass the launched command's output through (stderr)")
    diag.add_argument("--try-fix", action="store_true",
                      help="after a departure, relaunch the command with the cause's fix applied and time both "
                           "(launch mode)")
    diag.add_argument("--memory-history", action="store_true",
                      help="(launch mode) record every CUDA allocation from the job's start, so that an out-of-memory "
                           "walk leaves the allocator's snapshot for pytorch.org/memory_viz (allocations cost more)")

    watch = sub.add_parser("watch", help="stay on a job for hours; walk a playbook the moment it departs from itself",
                           usage="fieldguide watch (--pid PID | -- CMD [ARGS...]) [--duration SECONDS] "
                                 "[--report-dir DIR] [--format json|md|html] [--rules FILE] [--no-tui]",
                           epilog=WATCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    watch.add_argument("--pid", type=int, help="watch this running process (never stopped or killed)")
    watch.add_argument("--duration", type=float, help="stop after this many seconds (default: the job's end or Ctrl-C)")
    watch.add_argument("--report-dir", type=Path,
                       help="where each walk's report and events.jsonl go (default: ./fieldguide-watch-DATE-TIME)")
    watch.add_argument("--format", choices=("json", "md", "html"), default="json", help="the reports' format")
    watch.add_argument("--rules", type=Path, help="the watch's thresholds (default: watch.yaml beside the playbooks)")
    watch.add_argument("--no-tui", action="store_true", help="one line per event on stdout, even on a terminal")
    watch.add_argument("--show-output", action="store_true", help="pass the launched command's output through (stderr)")

    sub.add_parser("playbooks", help="list installed playbooks with their one-line purpose")

    rep = sub.add_parser("report", help="render a saved JSON report, or merge several (`report merge A.json B.json ...`)",
                         usage="fieldguide report PATH.json [--format md|html|json] [-o PATH] | "
                               "fieldguide report merge A.json B.json ... [--format json|md|html] [-o PATH]")
    rep.add_argument("path", type=Path, help="a JSON report, or the word `merge` followed by reports")
    rep.add_argument("more", type=Path, nargs="*", help=argparse.SUPPRESS)
    rep.add_argument("--format", choices=("md", "html", "json"), default="md")
    rep.add_argument("--output", "-o", type=Path, help="write here instead of stdout")

    cal = sub.add_parser("calibrate", help="measure this machine once (cached); expectations may refer to it")
    cal.add_argument("--force", action="store_true", help="measure again even if a calibration is cached")
    cal.add_argument("--show", action="store_true", help="print the cached calibration without measuring")
    cal.add_argument("--json", action="store_true", help="print the calibration as JSON")

    timing = sub.add_parser("timing", help="honest timing on your own loop: naive timers vs synchronized medians",
                            usage="fieldguide timing [--steps N] -- CMD [ARGS...]")
    timing.add_argument("--steps", type=int, default=400, help="steps to time (default 400)")
    timing.add_argument("--timeout", type=float, default=120.0, help="most seconds to wait for the steps")

    explain = sub.add_parser("explain", help="print the field-guide page of a cause id, or what a healthy leaf means")
    explain.add_argument("cause", metavar="ID", nargs="?",
                         help="a cause id (input.cpu_bound) or a healthy leaf (device.compute_bound)")
    explain.add_argument("--list", action="store_true", help="list every cause id and healthy leaf")

    completion = sub.add_parser("completion", help="print a shell completion script: eval \"$(fieldguide completion bash)\"")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    return parser


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


class _Interrupts:
    """SIGTERM / SIGHUP (a closed SSH or tmux pane) end a walk like Ctrl-C. The first of any of
    them interrupts; the ones after it wait: the launched job is being ended and the report
    written, and cutting that short would leave the job running."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.count == 1:
            raise KeyboardInterrupt(_signal_name(signum))  # what ended the walk, for its report
        sys.stderr.write("fieldguide: ending the launched job and writing the report; a moment\n")

    def walk_over(self) -> None:
        """The walk has ended: from now on a signal waits for the job's end and the report
        (one that raised while the job was being ended lost the summary and the report)."""
        self.count = max(self.count, 1)


_interrupt = _Interrupts()


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def main(argv: list[str] | None = None) -> int:
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)  # so that a launched job is ended and the report written
    argv = list(sys.argv[1:] if argv is None else argv)
    own, cmd = split_command(argv)
    args = build_parser().parse_args(own)
    try:
        return _dispatch(args, cmd)
    except BrokenPipeError:
        # The reader went away (`| head`): the rest is not wanted, and neither is a traceback when
        # Python flushes stdout at exit (the docs' recipe: point stdout at /dev/null).
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except FieldguideError as err:
        print(f"fieldguide: {err}", file=sys.stderr)
        for line in err.detail:
            print(f"  | {line}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _dispatch(args: argparse.Namespace, cmd: list[str]) -> int:
    if args.command == "playbooks":
        return _list_playbooks()
    if args.command == "report":
        if str(args.path) == "merge":
            from fieldguide.report.merge import merge_command
            return merge_command(args.more, args.format, args.output)
        if args.more:
            raise FieldguideError("report takes one JSON report; to combine several use `fieldguide report merge A.json B.json ...`")
        return _render_saved(args)
    if args.command == "calibrate":
        from fieldguide.calibrate import calibrate_command
        return calibrate_command(force=args.force, show=args.show, as_json=args.json)
    if args.command == "timing":
        if not cmd:
            raise FieldguideError("timing needs a command to launch: fieldguide timing -- python train.py")
        from fieldguide.experiments.timing import timing_command
        return timing_command(cmd, steps=args.steps, timeout=args.timeout)
    if args.command == "explain":
        if args.list:
            return _list_explainable()
        if not args.cause:
            raise FieldguideError("explain needs a cause id or a healthy leaf (`fieldguide explain --list` lists them)")
        return _explain(args.cause)
    if args.command == "completion":
        from fieldguide.frontends.completion import script

        sys.stdout.write(script(args.shell, build_parser()))
        return 0
    if args.command == "demo":
        command = demo_command()  # before anything starts: no torch is one line, not a traceback
        if args.no_tui or not on_terminal() or args.report or args.budget or args.json:
            return _diagnose_headless("slow-training", None, command, args.report, args.format,
                                      args.budget, show_output=False, json_out=args.json)
        return _tui(None, command, "slow-training", demo=True)
    if args.command == "watch":
        return _watch(args, cmd)
    if args.command == "diagnose":
        if sum((args.pid is not None, bool(cmd), args.local)) != 1:
            raise FieldguideError("diagnose needs exactly one target: --pid PID, -- CMD [ARGS...] or --local")
        # Asking for a report file, a budget or the job's output means a headless run (the TUI
        # exports from its own dialog).
        # So does a stdin or stdout that is not a terminal (the TUI draws on one and reads keys from the other).
        headless = (args.no_tui or not on_terminal() or args.report or args.budget or args.show_output
                    or args.local or args.try_fix or args.json)
        if args.local:
            _check_local(args.playbook)
        if args.try_fix and not cmd:
            raise FieldguideError("--try-fix relaunches the job: it needs a launched command (-- CMD), not --pid")
        if args.memory_history and not cmd:
            raise FieldguideError("--memory-history is armed as the job starts: it needs a launched command (-- CMD); "
                                  "a running process cannot start recording its past allocations")
        extra_arm = (MEMORY_HISTORY,) if args.memory_history else ()
        if headless:
            return _diagnose_headless(args.playbook, args.pid, cmd, args.report, args.format, args.budget,
                                      show_output=args.show_output, try_fix=args.try_fix, json_out=args.json,
                                      extra_arm=extra_arm)
        return _tui(args.pid, cmd, args.playbook, extra_arm=extra_arm)
    if not on_terminal():  # the TUI would wait for keys that never come: say what to run instead
        raise FieldguideError(tui_hint(args.pid, cmd))
    return _tui(args.pid, cmd, None)


def _watch(args: argparse.Namespace, cmd: list[str]) -> int:
    if (args.pid is not None) == bool(cmd):
        raise FieldguideError("watch needs exactly one target: --pid PID or -- CMD [ARGS...]")
    if args.duration is not None and not (args.duration > 0 and args.duration != float("inf")):
        raise FieldguideError("--duration must be a positive number of seconds")
    import signal

    from fieldguide.frontends.watchline import open_watch, watch_headless

    headless = args.no_tui or args.show_output or not on_terminal()  # the job's output would garble the screen
    run_app: Any = None
    if not headless:
        try:
            from fieldguide.frontends.tui import watchapp
        except ImportError as err:
            raise FieldguideError(f"the TUI is not available ({err}); use --no-tui") from None
        run_app = watchapp.run_watch_app
    echo = (lambda line: print(f"  | {line}", file=sys.stderr)) if args.show_output else None
    sentinel, target = open_watch(args.pid, cmd, args.report_dir, duration=args.duration, fmt=args.format,
                                  rules_file=args.rules, echo=echo)
    if run_app is None:
        # The first Ctrl-C ends the watch; the ones after wait for the job's end and the last event.
        signal.signal(signal.SIGINT, _interrupt)
        status = watch_headless(sentinel, target)
        _interrupt.walk_over()
    else:
        status = run_app(sentinel, target)
    if sentinel.failure:
        raise FieldguideError(f"the watch stopped: {sentinel.failure} (events in {sentinel.report_dir})",
                              exit_code=3)
    return status


def _check_local(playbook_id: str) -> None:
    """--local measures the machine with no process: only a playbook that walks without one can."""
    from fieldguide.playbook import find_playbook, list_playbooks

    if find_playbook(playbook_id).local:
        return
    local = [p.id for p in list_playbooks([]) if p.local]
    raise FieldguideError(f"--local measures the machine with no process, and the playbook {playbook_id} needs one "
                          f"(--pid PID or -- CMD); the machine is measured by "
                          + (", ".join(f"--playbook {p}" for p in local) or "no installed playbook"))


def _isatty(stream: object) -> bool:
    isatty = getattr(stream, "isatty", None)  # None where there is no console (pythonw, a daemon)
    try:
        return bool(isatty is not None and isatty())
    except (ValueError, OSError):  # a closed stream
        return False


def on_terminal() -> bool:
    """Whether the TUI can run here: it draws on stdout and reads keys from stdin, so both must be a
    terminal, and one that can draw (TERM=dumb, an editor's shell or a serial console, cannot)."""
    import os

    return _isatty(sys.stdin) and _isatty(sys.stdout) and os.environ.get("TERM", "") != "dumb"


def tui_hint(pid: int | None = None, cmd: list[str] | None = None) -> str:
    """One line for a TUI asked for without a terminal: what to run instead."""
    if pid is not None:
        target = f"--pid {pid}"
    elif cmd:
        target = "-- CMD [ARGS...]"
    else:
        target = "(--pid PID | -- CMD [ARGS...])"
    return (f"the TUI needs a terminal (stdin and stdout); use `fieldguide diagnose --playbook ID --no-tui {target}` "
            "or `fieldguide playbooks`")


DEMO_PYTHON_ENV = "FIELDGUIDE_DEMO_PYTHON"
_HAS_TORCH = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"


def demo_python() -> str:
    """The interpreter that runs the demo's training job: $FIELDGUIDE_DEMO_PYTHON, else this one.

    fieldguide itself never needs torch (the job's own interpreter does), so torch is an
    extra; the demo job needs it. Checked without importing torch here."""
    how = f"pip install 'fieldguide[demo]', or set {DEMO_PYTHON_ENV} to a Python that has torch"
    chosen = os.environ.get(DEMO_PYTHON_ENV, "").strip()
    if not chosen:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise FieldguideError(f"the demo trains a small torch model, and this Python ({sys.executable}) "
                                  f"has no torch: {how}")
        return sys.executable
    import shutil
    import subprocess

    python = shutil.which(chosen) or chosen
    try:
        done = subprocess.run([python, "-c", _HAS_TORCH], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise FieldguideError(f"{DEMO_PYTHON_ENV}={chosen} cannot be run ({getattr(err, 'strerror', None) or err}): "
                              f"{how}") from None
    if done.returncode == 3:
        raise FieldguideError(f"{DEMO_PYTHON_ENV}={chosen} has no torch: {how}")
    if done.returncode != 0:
        raise FieldguideError(f"{DEMO_PYTHON_ENV}={chosen} is not a working Python (exit {done.returncode}): {how}")
    return python


def demo_command() -> list[str]:
    """The bundled faulty workload, run by demo_python()."""
    from fieldguide import workloads

    return [demo_python(), str(workloads.path(workloads.DEMO))]


def _list_playbooks() -> int:
    from fieldguide.playbook import list_playbooks

    problems: list[str] = []
    import shutil
    import textwrap

    playbooks = list_playbooks(problems)
    width = max((len(p.id) for p in playbooks), default=0) + 2
    # On a terminal each purpose wraps under itself; off one, a line per playbook.
    columns = shutil.get_terminal_size().columns if sys.stdout.isatty() else 0
    for playbook in playbooks:
        line = f"{playbook.id:<{width}}{playbook.purpose}"
        if columns > width + 20:
            line = textwrap.fill(line, columns - 1, subsequent_indent=" " * width)
        print(line)
    for problem in problems:
        print(f"fieldguide: skipped a malformed playbook: {problem}", file=sys.stderr)
    return 0


def _render_saved(args: argparse.Namespace) -> int:
    from fieldguide.report import load_report
    from fieldguide.report.render import render

    findings = load_report(args.path)  # anything that is not a report (a 100,000-deep JSON): one line
    try:
        text = render(findings, args.format)
    except (KeyError, TypeError, ValueError) as err:
        raise FieldguideError(f"{args.path} is not a complete fieldguide report ({type(err).__name__}: {err})") from None
    if args.output:
        from fieldguide.safewrite import write_text

        parent = args.output.parent if str(args.output.parent) else Path(".")
        if not parent.is_dir():  # as `diagnose --report`: a typo in a path makes no directories
            raise FieldguideError(f"-o {args.output}: no such directory {parent}")
        try:
            write_text(args.output, text)
        except OSError as err:
            raise FieldguideError(f"cannot write {args.output}: {err.strerror or err}") from None
    else:
        sys.stdout.write(text)
    return 0


def _list_explainable() -> int:
    from fieldguide.playbook import list_playbooks, load_causes, playbook_dirs

    causes = load_causes(playbook_dirs()[-1])
    leaves = {leaf: text for playbook in list_playbooks([]) for leaf, text in playbook.leaves.items()}
    rows = [(cid, cause.title) for cid, cause in sorted(causes.items())]
    rows += [(leaf, "healthy: " + _first_sentence(text)) for leaf, text in sorted(leaves.items())]
    width = max((len(cid) for cid, _ in rows), default=0)
    print("\n".join(f"{cid:<{width}}  {title}".rstrip() for cid, title in rows))
    return 0


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    head, dot, _ = flat.partition(". ")
    return head + dot.strip()


def _show_markdown(text: str) -> None:
    """A page rendered on a terminal; off one, its Markdown as it is (nothing wrapped or padded)."""
    if not sys.stdout.isatty():
        sys.stdout.write(text.rstrip("\n") + "\n")
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))


def _explain(item_id: str) -> int:
    """The field-guide page of a cause, or what a healthy leaf (a clean walk's conclusion) means."""
    from fieldguide.playbook import list_playbooks, load_causes, playbook_dirs

    causes = load_causes(playbook_dirs()[-1])
    cause = causes.get(item_id)
    if cause is not None:
        from fieldguide.report.fixsteps import page_markdown  # the page as every report shows it

        _show_markdown(f"# {cause.id}: {cause.title}\n\n" + page_markdown(cause.why, cause.fix, cause.verify, level=2))
        return 0
    playbooks = list_playbooks([])  # a malformed playbook has no leaves to tell of (`playbooks` names it)
    found = [(playbook, playbook.leaves[item_id]) for playbook in playbooks if item_id in playbook.leaves]
    if not found:
        leaves = sorted({leaf for playbook in playbooks for leaf in playbook.leaves})
        raise FieldguideError(f"unknown cause or leaf {item_id!r}; causes: {', '.join(sorted(causes))}; "
                              f"healthy leaves: {', '.join(leaves) or 'none'}")
    pages = [f"# {item_id}: a healthy leaf\n"]
    for playbook, text in found:
        pages.append(f"## In the playbook {playbook.id} ({playbook.title})\n\n"
                     f"A clean walk of {playbook.id} ends here: no cause was found.\n\n{text}\n")
    _show_markdown("\n".join(pages))
    return 0


def _diagnose_headless(*args: Any, **kwargs: Any) -> int:
    from fieldguide.frontends.headless import diagnose_headless

    return diagnose_headless(*args, on_interrupt=_interrupt, **kwargs)


def _tui(pid: int | None, cmd: list[str], playbook_id: str | None, demo: bool = False,
         extra_arm: tuple[str, ...] = ()) -> int:
    try:
        from fieldguide.frontends.tui.app import run_app
    except ImportError as err:
        raise FieldguideError(f"the TUI is not available ({err}); use --no-tui") from None
    return run_app(pid=pid, cmd=cmd or None, playbook_id=playbook_id, demo=demo, extra_arm=extra_arm)


def run() -> NoReturn:
    """`python -m fieldguide.frontends.cli`: main(), then flush and leave at once with its status.

    os._exit is deliberate: a probe thread still inside a measurement (a py-spy window, an
    agent request) when the walk is cancelled must not hold the process open for seconds
    after the user asked to quit. os._exit skips the flush of Python's own buffers, so they
    are flushed here first: otherwise `fieldguide playbooks | cat` (stdout a pipe, block
    buffered) would print nothing."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`) or a closed stream: nothing to keep
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
