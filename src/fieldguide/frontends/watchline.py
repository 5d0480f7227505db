"""`fieldguide watch` without the TUI: one line per event on stdout, the events also in
DIR/events.jsonl for log shippers and scripts."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from fieldguide.errors import FieldguideError

SERIES_LABELS = {"step_ms": "step", "input_share": "input", "memory_mb": "memory", "gpu_util": "GPU busy",
                 "sm_active": "SM active", "gflops": "achieved"}


def default_report_dir() -> Path:
    """A new name each time, not to be guessed: in a shared directory another user could otherwise
    make the folder (or a link) a watch started at that second would write into."""
    import secrets

    return Path(f"fieldguide-watch-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")


def prepare_report_dir(path: Path) -> Path:
    """The directory for the reports and events.jsonl: made private if missing, or this user's own
    real directory others cannot write; one line (exit 2) for anything else or if it cannot be written."""
    from fieldguide.safewrite import check_writable, own_directory

    try:
        own_directory(path)
    except OSError as err:
        raise FieldguideError(f"--report-dir {path}: {err.strerror or err}") from None
    try:
        check_writable(path)
    except OSError as err:
        raise FieldguideError(f"--report-dir {path}: cannot write there ({err.strerror or err})") from None
    return path


def value_text(series: str, value: float | None) -> str:
    if value is None:
        return "—"
    if series == "input_share":
        return f"{value:.0%}"
    if series == "memory_mb":
        return f"{value:+.1f} MB/min"
    if series in ("gpu_util", "sm_active"):
        return f"{value:.0f}%"
    if series == "gflops":
        return f"{value:.3g} GFLOP/s"
    return f"{value:.1f} ms"


def level_text(series: str, value: float | None) -> str:
    """A series' latest point (memory as a level in MB; its baseline is a slope)."""
    if value is not None and series == "memory_mb":
        return f"{value:.0f} MB"
    return value_text(series, value)


def slope_series(rules: Any) -> set[str]:
    """The series whose baseline is a slope, not a level: no baseline line to draw."""
    return {s.series for s in rules.signals if s.condition == "slope_mb_per_min"}


def event_line(event: dict[str, Any]) -> str:
    """One event, one line: seconds since the watch started, what happened, the numbers."""
    kind, t = event["kind"], f"{event['t']:>6.0f}s"
    if kind == "start":
        target = event.get("target") or {}
        what = target.get("pid")
        missing = "; ".join(f"no {k}: {v}" for k, v in (event.get("missing") or {}).items())
        return f"{t}  watching   pid {what}" + (f" ({missing})" if missing else "")
    if kind == "baseline":
        parts = [f"{SERIES_LABELS.get(k, k)} {value_text(k, v)}" for k, v in event["baseline"].items()]
        return f"{t}  baseline   " + (" · ".join(parts) or "nothing measured")
    if kind == "departing":
        return f"{t}  departs    " + "; ".join(_changed(c) for c in event["changed"]) + f": walking {event['playbook']}"
    if kind == "departure":
        said = event.get("cause") or event.get("conclusion") or event.get("verdict") or "no verdict"
        tail = f" → {event['report']}" if event.get("report") else f" ({event['error']})" if event.get("error") else ""
        return f"{t}  {'cause' if event.get('cause') else 'walked':<10} {said} ({event['playbook']}, " \
               f"{event.get('walk_s', 0):.0f} s walk){tail}"
    if kind == "end":
        count = event.get("departures", 0)
        failed = f"; the job {event['job_failed']}" if event.get("job_failed") else ""
        return f"{t}  end        {event['why']}; {count} departure{'s' if count != 1 else ''}{failed}"
    return f"{t}  {kind:<10} {event.get('error', '')}"


def _changed(change: dict[str, Any]) -> str:
    series = change["series"]
    return f"{change['title']} {value_text(series, change.get('baseline'))} → {value_text(series, change.get('now'))}"


def open_watch(pid: int | None, cmd: list[str], report_dir: Path | None, *, duration: float | None, fmt: str,
               rules_file: Path | None, echo: Any = None) -> tuple[Any, Any]:
    """The sentinel on its target, everything checked before the job is launched: the rules, the
    directory (one line and exit 2 for either), then the target."""
    from fieldguide.walk.session import open_target
    from fieldguide.watch.rules import load_rules
    from fieldguide.watch.sentinel import Sentinel
    from fieldguide.watch.sources import AttachSource, LaunchSource

    rules = load_rules(rules_file)
    folder = prepare_report_dir(report_dir or default_report_dir())
    target = open_target(pid, cmd or None, echo=echo)
    try:
        source = LaunchSource(target) if pid is None else AttachSource(target)
        return Sentinel(target, source, rules, folder, duration=duration, fmt=fmt), target
    except BaseException:
        target.close()
        raise


def watch_headless(sentinel: Any, target: Any) -> int:
    """Watch until the duration, the job's end or Ctrl-C, a line per event; 1 when the job departed."""
    from fieldguide.watch.sentinel import EVENTS_FILE

    print(f"fieldguide watch: events in {sentinel.report_dir / EVENTS_FILE}", file=sys.stderr)
    sentinel.on_event = lambda event: print(event_line(event), flush=True)
    try:
        sentinel.run()
    finally:
        target.close()
    return int(sentinel.exit_status)
