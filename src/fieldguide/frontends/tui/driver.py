"""The thread side of a walk: open the target, step the walk, re-run or jump to a node,
re-measure the departure, export. Every method blocks; the walk screen calls them from
thread workers. No Textual here, and no widget is ever touched from these methods.

One probe operation at a time: `op_lock` is held for the whole of each, so a jump asked
for while a step measures simply waits its turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldguide.frontends.tui.model import TargetSpec
from fieldguide.report.vocabulary import REMEASURE

if TYPE_CHECKING:
    from fieldguide.playbook import Playbook
    from fieldguide.report.findings import Findings
    from fieldguide.targets import Target
    from fieldguide.walk.engine import NodeResult
    from fieldguide.walk.session import Session

# A session is built from what the user chose; the real factory launches or attaches,
# the tests' replay factory serves recorded measurements.
SessionFactory = Callable[[TargetSpec, "Playbook", Callable[[dict[str, Any]], None], Callable[[str], None]], "Session"]

EXTRA_BUDGET = 30.0  # seconds of measurement granted to each re-run, jump or re-measure the user asks for


def export_format(path: Path) -> str | None:
    """The report format `path`'s suffix names (the exporters' own table), None for any other.
    Read when a report is exported: it imports every format and the findings with them, ~100 ms
    that the TUI's first screen need not pay."""
    from fieldguide.report.render import SUFFIXES

    return SUFFIXES.get(path.suffix.lower())


class Closing(Exception):
    """The app is quitting: stop before measuring anything else."""


def real_session(spec: TargetSpec, playbook: Playbook, on_reading: Callable[[dict[str, Any]], None],
                 echo: Callable[[str], None]) -> Session:
    from fieldguide.walk.session import Session, launch_arm, launch_env, open_target

    target = open_target(spec.pid, list(spec.cmd) or None, echo=echo, arm=launch_arm(playbook, spec.arm),
                         extra_env=launch_env(playbook))
    return Session(playbook, target, on_reading=on_reading)


def is_launched(target: Target | None) -> bool:
    return target is not None and getattr(target, "kind", "") == "launch" and hasattr(target, "popen")


class WalkDriver:
    def __init__(self, spec: TargetSpec, playbook: Playbook, factory: SessionFactory, *,
                 on_reading: Callable[[dict[str, Any]], None], echo: Callable[[str], None],
                 track: Callable[[Target], None]) -> None:
        self.spec, self.playbook, self.factory = spec, playbook, factory
        self.on_reading, self.echo, self.track = on_reading, echo, track
        self.session: Session | None = None  # the walk on record: what the report exports
        self.live: Session | None = None  # where measurements go now (a re-measure may relaunch the job)
        self.op_lock = threading.Lock()
        self.closing = threading.Event()
        # What the user measured beyond the walk, for the report: (result, action, when).
        self.reruns: list[tuple[NodeResult, str, str]] = []
        self.experiments: list[dict[str, Any]] = []  # fixes tried (t on the departure page)
        self.exported_artifacts: list[Any] = []  # the viewers' files the last export placed beside its report
        self._reruns_lock = threading.Lock()

    # -- opening -----------------------------------------------------------------------------

    def open(self, started: Callable[[dict[str, Any]], object]) -> Session:
        session = self._new_session()
        started(session.target.describe())
        session.wait_ready()  # a launched job: until the agent reports training steps
        self._check_closing(session)
        session.read_environment()
        self.session = self.live = session
        return session

    def _new_session(self) -> Session:
        session = self.factory(self.spec, self.playbook, self.on_reading, self.echo)
        self.track(session.target)
        self._check_closing(session)
        return session

    def _check_closing(self, session: Session) -> None:
        if self.closing.is_set():
            session.runner.cancelled.set()
            raise Closing()

    # -- probe operations ------------------------------------------------------------------------

    def _begin(self, session: Session, *, extra_budget: bool) -> None:
        if self.closing.is_set():
            raise Closing()
        session.runner.cancelled.clear()  # a cancelled re-run before this one must not cancel this one
        if extra_budget:
            session.runner.budget = max(session.runner.budget, session.runner.spent + EXTRA_BUDGET)

    def step(self, started: Callable[[str], object]) -> tuple[NodeResult | None, bool]:
        """Run the walk's current node, record it on the walk's path, follow its edge."""
        assert self.session is not None
        with self.op_lock:
            self._begin(self.session, extra_budget=False)
            if self.session.walk.current is None:
                return None, False
            started(self.session.walk.current)
            result = self.session.walk.step()
            return result, self.session.runner.cancelled.is_set()

    def _record(self, result: NodeResult, action: str) -> None:
        with self._reruns_lock:
            from fieldguide.report.findings import utc_now

            self.reruns.append((result, action, utc_now()))

    def run_node(self, node_id: str, *, fresh: bool, started: Callable[[str], object],
                 action: str) -> tuple[NodeResult, bool]:
        """Measure and judge one node without moving the walk (a jump, or a re-run with `fresh`);
        recorded for the report as `action` unless it was cancelled."""
        assert self.live is not None
        with self.op_lock:
            live = self.live
            self._begin(live, extra_budget=True)
            if fresh:
                for option in self.playbook.nodes[node_id].measure:
                    live.runner.forget(option.probe)
            started(node_id)
            result = live.walk.run_node(node_id)
            cancelled = live.runner.cancelled.is_set()
            if not cancelled:
                self._record(result, action)
            return result, cancelled

    def departure_chain(self) -> list[str]:
        """The departure's node and the nodes after it that refined the cause."""
        assert self.session is not None
        walk = self.session.walk
        if walk.departure is None:
            return []
        if walk.departure.chain:  # the walk went on past it (the step's other shares): its own chain only
            return list(walk.departure.chain)
        ids = [r.node for r in walk.path]
        start = ids.index(walk.departure.node) if walk.departure.node in ids else 0
        return ids[start:]

    def remeasure(self, status: Callable[[str], object],
                  started: Callable[[str], object]) -> tuple[list[tuple[str, NodeResult | None, NodeResult]], str]:
        """Measure the departure's nodes again, with nothing reused. A launched job is started
        afresh first, so that a fix to its code is loaded; an attached pid is measured as it is."""
        assert self.session is not None and self.live is not None
        chain = self.departure_chain()
        before = {r.node: r for r in self.session.walk.path}
        with self.op_lock:
            self._begin(self.live, extra_budget=True)
            note = ""
            if is_launched(self.live.target):
                status("ending the job, to start it afresh with your fix loaded")
                self.live.target.close()
                status(f"starting {' '.join(self.spec.cmd)}")
                live = self._new_session()
                status(f"waiting for training steps (pid {live.target.pid})")
                live.wait_ready()
                self._check_closing(live)
                self.live = live
                note = f"the command was started afresh (pid {live.target.pid})"
            else:
                self.live.runner.forget()
                if not self.live.target.alive():
                    note = (f"pid {self.spec.pid} has exited: start your job again and attach to the new pid "
                            "(fieldguide --pid NEW)")
            rows: list[tuple[str, NodeResult | None, NodeResult]] = []
            for node_id in chain:
                self._begin(self.live, extra_budget=True)
                started(node_id)
                after = self.live.walk.run_node(node_id)
                if self.live.runner.cancelled.is_set():
                    note = "cancelled"
                    break
                rows.append((node_id, before.get(node_id), after))
                self._record(after, REMEASURE)
            return rows, note

    # -- ending ------------------------------------------------------------------------------------

    def cancel(self, note: str) -> None:
        """Stop measuring (cooperative: probes check the event), for quitting."""
        self.closing.set()
        for session in {id(s): s for s in (self.session, self.live) if s is not None}.values():
            session.cancel(note)

    def stop(self) -> None:
        """Stop measuring without a note (the screen went away)."""
        self.closing.set()
        for session in (self.session, self.live):
            if session is not None:
                session.runner.cancelled.set()

    def cancel_current(self) -> None:
        """Cancel the probe measuring now (a re-run the user replaced with another)."""
        if self.live is not None:
            self.live.runner.cancelled.set()

    # -- export ------------------------------------------------------------------------------------

    def export(self, path: Path) -> tuple[Path, str, str]:
        """Write the findings report; returns (path, format, verdict)."""
        from fieldguide.report import write_report

        assert self.session is not None
        fmt = export_format(path)
        if fmt is None:
            raise ValueError(f"{path.suffix or 'no suffix'} names no report format")
        walk = self.session.walk
        if not walk.finished and not self.session.note:
            self.session.note = f"exported mid-walk (next node: {walk.current}); the report is partial"
        elif walk.finished and self.session.note.startswith("exported mid-walk"):
            self.session.note = ""
        from fieldguide.report.artifacts import place

        # The files for the usual viewers go beside the report (`<stem>-artifacts/`), as a
        # headless walk's do: the report and its folder copied off the node keep every link.
        findings = place(self.findings(), path)
        self.exported_artifacts = list(findings.artifacts)
        written = write_report(findings, path, fmt)
        return written.resolve(), fmt, findings.verdict

    def findings(self) -> Findings:
        """The walk's findings, with what the user measured beyond it (re-runs, jumps, re-measures)."""
        assert self.session is not None
        findings = self.session.findings()
        with self._reruns_lock:
            reruns = list(self.reruns)
        for result, action, when in reruns:
            findings.record_rerun(result, action, when)
        findings.experiments = list(self.experiments)
        return findings

    def try_fix(self, progress: Callable[[str, dict[str, list[float]]], None],
                cancelled: Callable[[], bool]) -> dict[str, Any]:
        """Relaunch the job with the departure's fix applied and time the arms (fieldguide/experiments/tryfix.py);
        the result joins the findings. One operation at a time: it waits for any other."""
        from fieldguide.experiments.tryfix import try_fix
        from fieldguide.targets import LaunchTarget

        assert self.session is not None and self.live is not None
        departure = self.session.walk.departure
        if departure is None:
            return {"cause": "", "ran": False, "why": "no departure to try a fix for"}
        with self.op_lock:
            target = self.live.target
            if not isinstance(target, LaunchTarget) or not is_launched(target):
                result = {"cause": departure.cause.id, "ran": False,
                          "why": "only a launched job can be relaunched (an attached job is never paused)"}
            else:
                result = try_fix(target, departure.cause, progress=progress, cancelled=cancelled)
        self.experiments.append(result)
        return result
