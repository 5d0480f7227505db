"""The sentinel: stays on a job, learns its baseline once it trains, and when a signal departs
from it walks the signal's playbook on the spot, writes the report, and keeps watching.

Phases: waiting (for the first training steps; attached, from the start), warming (the rules'
warmup_s), learning (learn_s), watching. After each walk the job is learned anew (a settled
shift is the job's new self: one event, not one a second), starting a window after the walk,
whose own windows are not the job's rhythm. Every event is one JSON line in events.jsonl.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fieldguide.report.redact import redact_argv, redact_tree
from fieldguide.safewrite import append_line
from fieldguide.watch.detect import Detector, Reading, learn
from fieldguide.watch.rules import Signal, WatchRules
from fieldguide.watch.store import SeriesStore

EVENTS_FILE = "events.jsonl"
POLL_S = 1.0
READY_STEPS = 3  # launched: training has begun once the agent has seen this many steps


@dataclass
class Walking:
    """A walk under way, on its own thread."""

    playbook: str
    started: float  # monotonic
    detected_t: float  # seconds since the watch started
    changed: list[dict[str, Any]]
    session: Any = None
    done: threading.Event = field(default_factory=threading.Event)
    findings: Any = None
    error: str | None = None
    abandoned: bool = False  # the watch ended while the walk was being set up: cancel it as soon as it exists


def walk_session(playbook_id: str, target: Any) -> Any:
    """A walk of the playbook on the watched target (the job is not relaunched, nor re-attached)."""
    from fieldguide.playbook import find_playbook
    from fieldguide.walk.session import Session

    return Session(find_playbook(playbook_id), target)


class Sentinel:
    def __init__(self, target: Any, source: Any, rules: WatchRules, report_dir: Path, *,
                 duration: float | None = None, fmt: str = "json",
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 session_factory: Callable[[str, Any], Any] = walk_session,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.target, self.source, self.rules = target, source, rules
        self.report_dir = Path(report_dir)
        self.duration, self.fmt = duration, fmt
        self.on_event = on_event
        self.session_factory = session_factory
        self.clock = clock
        self.started = clock()
        self.store = SeriesStore()
        self.detector = Detector(rules, source.shape)
        self.baseline: dict[str, float] = {}
        self.readings: list[Reading] = []
        self.phase = "waiting" if source.kind == "launch" else "warming"
        self.phase_since = self.started
        self.walking: Walking | None = None
        self.events: list[dict[str, Any]] = []
        self._findings: dict[float, Any] = {}  # a departure event's t -> its walk's findings
        self.departures = 0
        self.ended: str | None = None
        self.failure: str | None = None  # the watch itself could not go on (said in its end event)
        # The job itself ended badly: it crashed, a signal killed it, or it ended before its
        # baseline (nothing was watched). The watch then exits 3, as `diagnose` does.
        self.job_failed: str | None = None
        self.stop_requested = threading.Event()
        self.lock = threading.Lock()  # the dashboard reads what tick() writes
        # A walk's end is reported once (by the loop, or by stop() from the TUI), and before the end event.
        self._walk_lock = threading.RLock()

    # -- the loop -------------------------------------------------------------------------------
    def run(self) -> str:
        """Watch until the duration, the job's end, or stop(); the reason it ended."""
        self.emit("start", target=self.target.describe(), rules=str(self.rules.path or ""),
                  missing=self.source.missing())
        try:
            while self.ended is None:
                self.tick(self.clock())
                if self.ended is None:
                    self.stop_requested.wait(POLL_S)
        except KeyboardInterrupt as interrupt:
            how = f"by {interrupt.args[0]}" if interrupt.args else "by the user (Ctrl-C)"
            self.finish(f"interrupted {how}")
        except Exception as failure:  # said in the end event and by the front end, never a traceback
            self.failure = f"{type(failure).__name__}: {failure}"
            self.finish(f"the watch failed: {self.failure}")
        finally:
            self.source.close()
        return self.ended or ""

    def stop(self, why: str) -> None:
        """End the watch from another thread (the TUI's quit)."""
        self.finish(why)
        self.stop_requested.set()

    def finish(self, why: str) -> None:
        """End the watch once: a walk under way is cancelled, waited for and reported (partial),
        then the end event."""
        with self.lock:
            if self.ended is not None:
                return
            self.ended = why
        walking = self.walking
        if walking is not None:
            walking.abandoned = True
            session = walking.session
            if session is not None and not walking.done.is_set():
                session.cancel(f"the watch ended ({why}) during the walk; the report is partial")
            if not walking.done.wait(15):
                walking.error = walking.error or "the walk did not end within 15 s of the watch's end"
            self._walk_done(walking)
        with self._walk_lock:  # a walk the loop is reporting right now is reported first
            said = {"job_failed": self.job_failed} if self.job_failed else {}
            self.emit("end", why=why, departures=self.departures, **said)

    def tick(self, now: float) -> None:
        """One poll: new points, then the phase's step."""
        polled = self.source.poll(now)
        with self.lock:
            for series, points in polled.points.items():
                self.store.add(series, points)
            for rank, points in polled.ranks.items():
                self.store.add_rank(rank, points)
            self.store.trim(now)
            self._advance(now, polled.steps_total)
        walking = self.walking  # read once: stop() on another thread may collect it meanwhile
        if walking is not None and walking.done.is_set():
            self._walk_done(walking)
        if self.ended is None:
            self._check_end(now)

    def _advance(self, now: float, steps_total: int) -> None:
        rules = self.rules
        if self.ended is not None:
            return
        if self.phase == "waiting" and steps_total >= READY_STEPS:
            self._enter("warming", now)
        elif self.phase == "warming" and now - self.phase_since >= rules.warmup_s:
            self._enter("learning", now)
        elif self.phase == "settling" and now - self.phase_since >= rules.window_s:
            self._enter("learning", now)
        elif self.phase == "learning" and now - self.phase_since >= rules.learn_s:
            self.baseline = learn(self.store.recent, self.phase_since, now, rules, self.source.shape)
            self.detector.reset()
            self._enter("watching", now)
            self.emit("baseline", baseline={k: round(v, 4) for k, v in self.baseline.items()},
                      learned_s=round(rules.learn_s, 1))
        elif self.phase == "watching":
            self.readings, fired = self.detector.step(self.store.recent, self.baseline, now)
            if fired:
                self._start_walk(now, fired)

    def _enter(self, phase: str, now: float) -> None:
        self.phase, self.phase_since = phase, now

    def _check_end(self, now: float) -> None:
        if self.duration is not None and now - self.started >= self.duration:
            self.finish(f"watched for {self.duration:g} s")
        elif not self.source.job_alive():
            walking = self.walking
            if walking is None or walking.done.is_set():
                self.job_failed = job_failure(self.target.ending(), bool(self.baseline))
                self.finish(self.target.gone_reason() or "the job ended")

    @property
    def exit_status(self) -> int:
        """3 when the job crashed, was killed or ended before its baseline; else 1 when it departed."""
        if self.job_failed or self.failure:
            return 3
        return 1 if self.departures else 0

    # -- departures -----------------------------------------------------------------------------
    def signal(self, signal_id: str) -> Signal:
        return next(s for s in self.rules.signals if s.id == signal_id)

    def _start_walk(self, now: float, fired: list[Reading]) -> None:
        """The first departed signal's playbook walks; every departed signal is in the event."""
        changed: list[dict[str, Any]] = []
        for reading in fired:
            signal = self.signal(reading.signal)
            changed.append({**reading.as_dict(), "title": signal.title, "series": signal.series,
                            "condition": signal.describe(), "playbook": signal.playbook})
        playbook = self.signal(fired[0].signal).playbook
        walking = Walking(playbook=playbook, started=now, detected_t=round(now - self.started, 1), changed=changed)
        self.walking = walking
        self.source.hold(True)
        self._enter("walking", now)
        self.emit("departing", changed=changed, playbook=playbook)

        def walk() -> None:
            try:
                walking.session = self.session_factory(playbook, self.target)
                if walking.abandoned:  # the watch ended while the session was being made
                    walking.session.cancel("the watch ended before the walk began")
                walking.findings = walking.session.run()
            except Exception as failure:  # the walk could not measure: said in the event, the watch goes on
                walking.error = f"{type(failure).__name__}: {failure}"
            finally:
                walking.done.set()

        threading.Thread(target=walk, name="fieldguide-watch-walk", daemon=True).start()

    def _walk_done(self, walking: Walking) -> None:
        with self._walk_lock:
            if self.walking is not walking:
                return
            self.walking = None
            self.source.hold(False)
            findings = walking.findings
            report = self._write_report(findings) if findings is not None else None
            runner = getattr(walking.session, "runner", None)
            if report is not None and runner is not None:  # its files are beside the report now
                runner.discard_artifacts()
            self.departures += 1
            cause = (findings.first_departure or {}).get("cause") if findings is not None else None
            event = self.emit("departure", detected_t=walking.detected_t, changed=walking.changed,
                              playbook=walking.playbook, verdict=getattr(findings, "verdict", None), cause=cause,
                              conclusion=getattr(findings, "conclusion", None), report=str(report) if report else None,
                              walk_s=round(self.clock() - walking.started, 1), error=walking.error)
            if findings is not None:
                self._findings[event["t"]] = findings
        with self.lock:
            self._enter("settling", self.clock())

    def _write_report(self, findings: Any) -> Path | None:
        from fieldguide.report.render import write_report

        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        path = self.report_dir / f"{stamp}-{findings.playbook}.{self.fmt}"
        try:
            return write_report(findings, path, self.fmt)
        except OSError as failure:
            self.emit("error", error=f"cannot write {path}: {failure.strerror or failure}")
            return None

    def findings_of(self, event: dict[str, Any]) -> Any:
        """The findings of a departure event's walk (None for any other event)."""
        return self._findings.get(event["t"]) if event.get("kind") == "departure" else None

    # -- events ---------------------------------------------------------------------------------
    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        wall = datetime.now(timezone.utc)
        target = fields.get("target")
        if isinstance(target, dict) and isinstance(target.get("cmdline"), list):  # read as argv: `--pass X`
            fields["target"] = {**target, "cmdline": redact_argv([str(a) for a in target["cmdline"]])}
        # Redacted as every report is: events.jsonl is the file offered to log shippers.
        event: dict[str, Any] = redact_tree({"t": round(self.clock() - self.started, 1),
                                             "time": wall.isoformat(timespec="milliseconds"), "kind": kind, **fields})
        self.events.append(event)
        line = json.dumps(event, default=str)
        try:
            append_line(self.report_dir / EVENTS_FILE, line + "\n")  # never through a link or a pipe
        except OSError:
            pass  # the directory was checked at the start; a full disk must not end the watch
        listener = self.on_event
        if listener is not None:
            try:
                listener(event)
            except OSError:  # stdout closed (`| head`): events.jsonl still has every event
                self.on_event = None
        return event


def job_failure(ending: dict[str, Any] | None, baseline: bool) -> str | None:
    """Why a job that ended under the watch ended badly (a non-zero exit, a signal, no baseline
    learned), or None for a job that trained, was watched and exited 0 (or whose status only its
    parent can read, once watched)."""
    if ending is not None and ending.get("signal"):
        return f"killed by {ending['signal']}"
    if ending is not None and ending.get("code") not in (0, None):
        return f"exited with status {ending['code']}"
    if not baseline:
        return "ended before its baseline was learned: nothing was watched"
    return None
