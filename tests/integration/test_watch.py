"""`fieldguide watch` on the workloads that change mid-run: an event naming the right cause soon
after the change and none before it; none at all on the healthy job with a trainer's rhythm.

`make test` runs two with rules whose windows are shorter (the same conditions, learnt and
held for less time), launched and attached, and the healthy job under the bundled rules for 100 s
(no alarm); `make test-all` runs every workload in every declared mode with the bundled rules:
the event within 60 s of the change, and four minutes of the healthy job with none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldguide.workloads import changing
from tests.conftest import FIELDGUIDE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DECLARED = changing.watch_declarations()


def quick_rules(folder: Path) -> Path:
    """The bundled rules with shorter warm-up, learning, windows and holds."""
    text = (ROOT / "playbooks" / "watch.yaml").read_text()
    for old, new in (("warmup_s: 20", "warmup_s: 3"), ("learn_s: 30", "learn_s: 15"), ("window_s: 10", "window_s: 5"),
                     ("sustain_s: 15", "sustain_s: 8"), ("sustain_s: 30", "sustain_s: 12")):
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "watch-quick.yaml"
    path.write_text(text)
    return path


def watch(tmp_path: Path, name: str, mode: str, *, change_after: float, seconds: float,
          rules: Path | None = None, until_departure: bool = False) -> tuple[list[dict], float | None, str]:
    """Watch the workload (launched, or attached to once it runs) until it ends, or with
    `until_departure` until its first departure event (then Ctrl-C, as a user would); its events,
    the change's wall-clock time, and the watch's output."""
    declared = DECLARED[name]
    mark, out = tmp_path / "changed-at", tmp_path / "watch"
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS=str(seconds), FIELDGUIDE_CHANGE_AFTER_S=str(change_after),
               FIELDGUIDE_CHANGE_MARK=str(mark), PYTHONUNBUFFERED="1", NO_COLOR="1")
    job = [sys.executable, *declared.python_args, str(changing.path(name))]
    options = ["--no-tui", "--report-dir", str(out), *(["--rules", str(rules)] if rules else [])]
    running = None
    if mode == "launch":
        command = [*FIELDGUIDE, "watch", *options, "--", *job]
    else:
        running = subprocess.Popen(job, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        time.sleep(4)  # the job imports torch and starts training
        command = [*FIELDGUIDE, "watch", "--pid", str(running.pid), *options]
    try:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + seconds + 120
        while proc.poll() is None and time.monotonic() < deadline:
            if until_departure and '"kind": "departure"' in read(out / "events.jsonl"):
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.5)
        stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 30))
    finally:
        if running is not None:
            running.kill()
            running.wait()
    said = stdout + stderr
    assert "Traceback" not in said, said
    events = [json.loads(line) for line in read(out / "events.jsonl").splitlines()]
    changed = float(mark.read_text()) if mark.exists() else None
    return events, changed, said


def read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def unix(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["time"]).timestamp()


def assert_named_after_the_change(events: list[dict], changed: float | None, cause: str, within: float,
                                  said: str) -> dict:
    assert changed is not None, said
    departures = [e for e in events if e["kind"] == "departure"]
    assert departures, said
    first = departures[0]
    assert unix(first) > changed, (changed, events)  # none before the change
    assert first["cause"] == cause, (first, said)
    assert unix(first) - changed <= within, (unix(first) - changed, said)
    assert first["report"] and Path(first["report"]).is_file()
    return first


@pytest.mark.alone
@pytest.mark.parametrize(("name", "mode"), [("loader_slows", "launch"), ("leak_starts", "attach")])
def test_a_change_is_named_soon_after_it_with_quick_rules(tmp_path: Path, name: str, mode: str) -> None:
    # The job outlasts any walk (the watch is stopped at its first departure): one cut short by the
    # job's own end names no cause.
    events, changed, said = watch(tmp_path, name, mode, change_after=25, seconds=120, rules=quick_rules(tmp_path),
                                  until_departure=True)
    first = assert_named_after_the_change(events, changed, DECLARED[name].cause or "", 45, said)
    assert first["playbook"] == DECLARED[name].playbook
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "start" and kinds[1] == "baseline" and kinds[-1] == "end", kinds
    assert "cause " in said and "baseline" in said  # the headless lines, one per event


@pytest.mark.alone
def test_the_shipped_rules_raise_no_alarm_on_a_trainers_rhythm(tmp_path: Path) -> None:
    """The bundled rules, unchanged, on the healthy job with a trainer's rhythm (workers restarted
    each epoch, an evaluation every ~20 s, a checkpoint every ~14 s): the baseline learned after 50 s,
    then 45 s watched through two evaluations and three checkpoints with no departure. `make
    test-all` watches it for four minutes in both modes."""
    events, _, said = watch(tmp_path, "periodic_healthy", "launch", change_after=1e9, seconds=100)
    assert [e for e in events if e["kind"] in ("departing", "departure")] == [], said
    baseline = next(e for e in events if e["kind"] == "baseline")
    assert {"step_ms", "input_share", "gflops"} <= set(baseline["baseline"]), baseline  # gflops: the achieved rate
    end = events[-1]
    assert end["kind"] == "end" and end["t"] - baseline["t"] >= 40, events


def changing_cases() -> list[object]:
    return [pytest.param(name, mode, id=f"{name}-{mode}") for name, d in DECLARED.items() for mode in d.modes]


@pytest.mark.alone
@pytest.mark.slow
@pytest.mark.parametrize(("name", "mode"), changing_cases())
def test_each_changing_workload_with_the_bundled_rules(tmp_path: Path, name: str, mode: str) -> None:
    declared = DECLARED[name]
    if declared.cause is None:  # the rhythm of a healthy trainer: no departure in four minutes
        events, _, said = watch(tmp_path, name, mode, change_after=1e9, seconds=240)
        assert [e for e in events if e["kind"] in ("departing", "departure")] == [], said
        assert any(e["kind"] == "baseline" for e in events), said
        return
    events, changed, said = watch(tmp_path, name, mode, change_after=75, seconds=160)
    assert_named_after_the_change(events, changed, declared.cause, 60, said)
