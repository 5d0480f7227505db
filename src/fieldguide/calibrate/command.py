"""`fieldguide calibrate`: run the bench in a Python that has torch, show it, cache it.

fieldguide's own process never imports torch: bench.py runs as a subprocess and reports one
JSON line per measurement, shown as it arrives.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from fieldguide.calibrate import cache
from fieldguide.calibrate.plot import SERIES_TITLES, number, render
from fieldguide.calibrate.results import Calibration, Point, derive
from fieldguide.errors import EXIT_BAD_INPUT, EXIT_CANNOT_MEASURE, FieldguideError

PYTHON_ENV = "FIELDGUIDE_CALIBRATE_PYTHON"
DEMO_PYTHON_ENV = "FIELDGUIDE_DEMO_PYTHON"
QUICK_ENV = "FIELDGUIDE_CALIBRATE_QUICK"  # fewer repeats and shorter windows (the tests)
TIMEOUT_S = 300.0
BENCH = Path(__file__).with_name("bench.py")


def torch_python() -> str:
    """$FIELDGUIDE_CALIBRATE_PYTHON, else $FIELDGUIDE_DEMO_PYTHON, else this Python if it has torch."""
    for env in (PYTHON_ENV, DEMO_PYTHON_ENV):
        chosen = os.environ.get(env, "").strip()
        if chosen:
            return shutil.which(chosen) or chosen
    if importlib.util.find_spec("torch") is None:
        raise FieldguideError(f"calibrate measures with torch, and this Python ({sys.executable}) has no torch: "
                              f"set {PYTHON_ENV} to a Python that has torch", exit_code=EXIT_BAD_INPUT)
    return sys.executable


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # it had ended
        pass


def _bench(python: str, *args: str, on_record: Any = None) -> list[dict[str, Any]]:
    """Run bench.py, handing each JSON line to on_record as it arrives; its records."""
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryFile(mode="w+") as errors:
        try:
            proc = subprocess.Popen([python, str(BENCH), *args], stdout=subprocess.PIPE, stderr=errors,
                                    text=True, start_new_session=True)  # its DataLoader workers in its group
        except OSError as err:
            raise FieldguideError(f"cannot run {python}: {err.strerror or err}", exit_code=EXIT_BAD_INPUT) from None
        # A bench that hangs (a wedged GPU, a worker that never returns) is ended, workers and all.
        timer = threading.Timer(TIMEOUT_S, _kill_group, (proc.pid,))
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a stray print from torch is not a measurement
                records.append(record)
                if on_record is not None:
                    on_record(record)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _kill_group(proc.pid)
                proc.wait()
        if proc.returncode == -signal.SIGKILL:
            raise FieldguideError(f"the calibration bench ran over {TIMEOUT_S:.0f} s and was stopped; nothing was "
                                  "cached", exit_code=EXIT_CANNOT_MEASURE)
        if proc.returncode != 0 or not records or records[-1].get("kind") not in ("done", "identity"):
            errors.seek(0)
            tail = [ln for ln in errors.read().splitlines() if ln.strip()][-8:]
            raise FieldguideError(f"the calibration bench failed (exit {proc.returncode}); nothing was cached",
                                  exit_code=EXIT_CANNOT_MEASURE, detail=tail)
    return records


def progress_line(record: dict[str, Any]) -> str | None:
    """One line per finished measurement."""
    if record.get("kind") == "series":
        p = Point.from_json(record)
        at = f"{p.x} worker{'' if p.x == 1 else 's'}" if p.series.startswith("loader.") else str(p.x)
        return (f"  {SERIES_TITLES.get(p.series, p.series):<22} {at:>12}  {number(p.median):>7} {p.unit:<10} "
                f"({number(p.min)}–{number(p.max)})")
    if record.get("kind") == "not_measured":
        return f"  {record.get('group')}: not measured ({record.get('reason')})"
    return None


def from_records(records: list[dict[str, Any]], elapsed: float) -> Calibration:
    identity = next(r for r in records if r.get("kind") == "identity")
    points = [Point.from_json(r) for r in records if r.get("kind") == "series"]
    not_measured = {str(r["group"]): str(r["reason"]) for r in records if r.get("kind") == "not_measured"}
    values, missing = derive(points, not_measured)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Calibration(host=cache.host(), torch=str(identity["torch"]), device=str(identity["device"]),
                       created=created, elapsed_s=elapsed, points=points, values=values, missing=missing,
                       identity={k: v for k, v in identity.items() if k != "kind"})


def show_cached(as_json: bool, console: Console) -> int:
    calibration = cache.for_this_machine()
    if calibration is None:
        raise FieldguideError(f"no calibration for this machine in {cache.cache_dir()}: run `fieldguide calibrate`",
                              exit_code=EXIT_BAD_INPUT)
    _print(calibration, as_json, console)
    return 0


def _print(calibration: Calibration, as_json: bool, console: Console) -> None:
    if as_json:
        print(json.dumps(calibration.to_json(), indent=2))
    else:
        console.print(render(calibration))


def _cache_refusal(path: Path) -> str | None:
    """Why the calibration could not be written to `path`, checked before measuring; None if it can."""
    from fieldguide.safewrite import check_writable, refusal

    why = refusal(path)
    if why:
        return why
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_writable(path.parent)
    except OSError as err:
        return str(err.strerror or err)
    return None


def calibrate(force: bool, as_json: bool, console: Console) -> int:
    python = torch_python()
    # Progress goes to stderr when stdout carries the JSON.
    talk = Console(stderr=True, width=min(console.width, 80), highlight=False) if as_json else console
    start = time.perf_counter()
    identity = _bench(python, "--identify")[0]
    path = cache.path_for(cache.host(), str(identity["torch"]), str(identity["device"]))
    if path.exists() and not force:
        try:
            cached = cache.read(path)
        except ValueError as err:
            talk.print(f"the cached calibration cannot be used ({err}); measuring again")
        else:
            talk.print(f"Using the cached calibration of {cached.created[:10]} ({path}); "
                       "`fieldguide calibrate --force` measures again.", soft_wrap=True)
            _print(cached, as_json, console)
            return 0
    cannot = _cache_refusal(path)
    if cannot:  # said before the bench: its minute and a half is not thrown away at the end
        raise FieldguideError(f"cannot cache the calibration in {path.parent}: {cannot}")
    quick = os.environ.get(QUICK_ENV, "").strip() not in ("", "0")
    talk.print(f"Calibrating {identity['device']} with torch {identity['torch']} "
               f"({'quick' if quick else 'under 90 s on 2 cores'}) ...")

    def shown(record: dict[str, Any]) -> None:
        line = progress_line(record)
        if line is not None:
            talk.print(line, markup=False)

    records = _bench(python, *(["--quick"] if quick else []), on_record=shown)
    elapsed = time.perf_counter() - start
    calibration = from_records(records, elapsed)
    try:
        written = cache.write(calibration)
    except OSError as err:  # the cache went away meanwhile: the figures are shown, not lost
        _print(calibration, as_json, console)
        raise FieldguideError(f"cannot cache the calibration in {path}: {err.strerror or err}") from None
    talk.print(f"Measured in {elapsed:.1f} s; cached in {written}", soft_wrap=True)
    _print(calibration, as_json, console)
    return 0
