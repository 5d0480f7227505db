"""One diagnosis session: open the target, walk the playbook, build the findings.

Shared by the headless CLI and the TUI, so what is tested is what ships.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldguide.analysis.coldstart import ColdStart, compile_spans, covered_seconds
from fieldguide.calibrate.cache import lookup_for_this_machine
from fieldguide.host.samplers import own_cpu_seconds
from fieldguide.playbook import Playbook
from fieldguide.probes.contention import describe, summarize
from fieldguide.probes.evidence import JOB, RANKS
from fieldguide.probes.step_budget import walk_budget
from fieldguide.report.artifacts import gather
from fieldguide.report.findings import Findings, environment_from, findings_from_walk
from fieldguide.targets import AttachTarget, LaunchTarget, LocalTarget, Target
from fieldguide.walk.engine import NodeResult, Walk
from fieldguide.walk.runner import ProbeRunner

DEFAULT_BUDGET = 45.0  # seconds of measurement: a slow-training walk ends well inside a minute
READY_TIMEOUT = 40.0  # how long a launched job may take to reach its first training steps
READY_SHARE = 0.6  # of the budget, at most, spent waiting for them


def open_target(pid: int | None = None, cmd: list[str] | None = None, *,
                echo: Callable[[str], None] | None = None, arm: tuple[str, ...] = (),
                extra_env: dict[str, str] | None = None) -> Target:
    """`arm`: agent capabilities a launched job measures with from its start (the playbook's);
    `extra_env`: what the playbook adds to a launched job's environment (see launch_env)."""
    if pid is not None:
        return AttachTarget(pid)
    if cmd:
        return LaunchTarget(cmd, echo=echo, arm=arm, extra_env=extra_env)
    return LocalTarget()


def launch_arm(playbook: Playbook, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a launched job arms from its start: the playbook's capabilities, then the user's
    (`memory:history` from --memory-history), each once; the agent joins a name's options."""
    return tuple(dict.fromkeys((*playbook.arm, *extra)))


def launch_env(playbook: Playbook, report: Path | None = None) -> dict[str, str]:
    """The environment a playbook adds to a job it launches: TORCH_TRACE, torch's structured
    compile log that tlparse reads, beside the report (or in a kept temporary folder); a
    TORCH_TRACE the user set is left alone."""
    if not playbook.torch_trace or os.environ.get("TORCH_TRACE"):
        return {}
    if report is not None:
        # Beside the report, but never through a name someone else made first (a link, their folder).
        from fieldguide.safewrite import private_directory

        folder = private_directory(report.with_name(f"{report.stem}-torch-trace"))
    else:
        folder = Path(tempfile.mkdtemp(prefix="fieldguide-torch-trace-"))
    return {"TORCH_TRACE": str(folder.resolve())}


def demo_command() -> list[str]:
    from fieldguide import workloads

    return [sys.executable, str(workloads.path(workloads.DEMO))]


@dataclass
class Session:
    playbook: Playbook
    target: Target
    budget: float = 0.0  # 0: the playbook's own, else DEFAULT_BUDGET
    on_reading: Callable[[dict[str, Any]], None] | None = None
    runner: ProbeRunner = field(init=False)
    walk: Walk = field(init=False)
    environment: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def __post_init__(self) -> None:
        if not self.budget:
            self.budget = self.playbook.budget or DEFAULT_BUDGET
        self.runner = ProbeRunner(self.target, self.budget, on_reading=self.on_reading)
        self._cpu_at_start = own_cpu_seconds()
        self.walk = Walk(self.playbook, self.target.capabilities, self.runner, calibration=lookup_for_this_machine)

    def wait_ready(self) -> None:
        """A launched job: wait for its first steps, charged to the budget (which bounds the whole
        walk), and at most READY_SHARE of it, so that the probes keep time to measure."""
        if isinstance(self.target, LaunchTarget):
            timeout = min(self.playbook.ready_timeout or READY_TIMEOUT, self.budget * READY_SHARE)
            started = time.monotonic()
            ready = self.target.wait_ready(timeout=timeout, cancelled=self.runner.cancelled.is_set)
            waited = time.monotonic() - started
            # A cold compile is measured (its spans are the job's cold start), not spent from the
            # budget: a 67 s compile once left the A/B's eager arm 19 s and the walk inconclusive.
            self.runner.spent += max(waited - self._compiling_between(started, started + waited), 0.0)
            if not ready and self.target.alive() and not self.runner.cancelled.is_set():
                self.note = self.target.not_ready_reason(timeout)
        # Windows the playbook will need later start now, alongside the first nodes.
        self.runner.prefetch(self.playbook.prefetch, self.target.capabilities())

    def _compiling_between(self, start: float, end: float) -> float:
        """Seconds the launched job spent compiling (torch.compile) in [start, end]."""
        agent = getattr(self.target, "agent", None)
        conn = agent.primary() if agent is not None else None
        if conn is None:
            return 0.0
        return covered_seconds(compile_spans(conn.stream("compile", "compiles").items), start, end)

    def read_environment(self) -> None:
        env = self.runner.measure_probe("env.versions", {})
        self.environment = environment_from(env.values, env.evidence.get("gpus", []), self._target_environ())

    def _target_environ(self) -> dict[str, str] | None:
        """The job's own environment variables (an attached job's differ from ours)."""
        if self.target.pid is None:
            return None
        import psutil

        try:
            return dict(psutil.Process(self.target.pid).environ())
        except psutil.Error:
            return None

    def run(self, on_result: Callable[[NodeResult], None] | None = None) -> Findings:
        self.wait_ready()
        self.read_environment()
        try:
            self.walk.run(on_result, stop=self.runner.cancelled.is_set)
        finally:
            self.runner.stop_prefetch()
        return self.findings()

    def cancel(self, note: str) -> None:
        self.note = note
        self.runner.cancelled.set()
        self.runner.stop_prefetch(wait=0)

    def findings(self) -> Findings:
        if not self.environment:
            self.environment = environment_from({}, [])
        ending = self.target.ending()
        note = self.note
        if self.runner.refused_for_budget:
            said = (f"the {self.budget:.0f} s budget ran out before {', '.join(self.runner.refused_for_budget)} "
                    f"could measure: try --budget {max(2 * self.budget, 60):.0f}")
            note = f"{note}; {said}" if note else said
        if ending is not None:
            # A job that ended is evidence: the walk judged what it measured before the end.
            said = f"{ending['text']}; the walk judged what was measured before it ended"
            note = f"{said}; {note}" if note else said
        findings = findings_from_walk(self.walk, self.target.describe(), self.environment, note=note,
                                      log_tail=self.target.log_tail())
        findings.exit = ending
        ranks = findings.first_of(RANKS)  # the first node of the path that compared ranks
        findings.ranks = list(ranks) if ranks else []
        findings.job = findings.first_of(JOB)
        findings.cold_start = self.cold_start()
        findings.budget = walk_budget([(key[0], m) for key, m in self.runner.measured()])
        findings.contention = summarize(self.runner.windows)
        findings.self_cpu_s = round(own_cpu_seconds() - self._cpu_at_start, 2)
        # Every window the walk took leaves its files, those no node's evidence carries included
        # (a prefetched stack window whose counts a node read as values only).
        findings.artifacts = gather([*(m.evidence for _, m in self.runner.measured()),
                                     *findings.evidence.values()])
        busy = describe(findings.contention)
        if busy:
            findings.note = f"{findings.note}; {busy}" if findings.note else busy
        return findings

    def cold_start(self) -> ColdStart | None:
        """A launched job's start taken apart so far (fieldguide/analysis/coldstart.py); None when attached."""
        if isinstance(self.target, LaunchTarget) and self.target.agent is not None:
            from fieldguide.analysis.coldstart import from_connection

            return from_connection(self.target.started, self.target.agent.primary(), time.monotonic())
        return None

