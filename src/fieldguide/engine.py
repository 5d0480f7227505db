"""The walk: a node's expectation applied to a Measurement gives a verdict; edges give the next node.

Pure logic: measuring is delegated to a `measure(option) -> Measurement`
callable (the ProbeRunner in real walks, constructed measurements in tests).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.playbook.expect import NotEvaluable
from fieldguide.playbook.schema import Cause, Edge, MeasureOption, Node, Playbook, render_template
from fieldguide.probes import registry
from fieldguide.probes.base import NEED_REASONS

PASS, DEPART, SKIP, ERROR = "pass", "depart", "skip", "error"
DEPARTURE, CLEAN, INCONCLUSIVE = "departure", "clean", "inconclusive"


@dataclass
class NodeResult:
    node: str
    status: str
    measured: dict[str, Any] = field(default_factory=dict)
    expected: str = ""
    probe: str | None = None
    seconds: float = 0.0
    note: str = ""
    measurement: Measurement | None = None

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "measured": self.measured, "expected": self.expected,
                "probe": self.probe, "seconds": round(self.seconds, 3), "note": self.note}


@dataclass
class Departure:
    node: str
    cause: Cause
    measured: dict[str, Any]
    expected: str
    summary: str
    evidence: dict[str, Any]


def judge(node: Node, capabilities: set[str], measure: Callable[[MeasureOption], Measurement]) -> NodeResult:
    """Decide one node: the first measure option that can measure and be evaluated decides."""
    reasons: list[str] = []
    skipped_only = True
    seconds = 0.0
    for option in node.measure:
        probe_cls = registry.get(option.probe)
        assert probe_cls is not None, option.probe  # validated at load time
        unmet = probe_cls.unmet_needs(capabilities)
        if unmet:
            reasons.append(f"{option.probe} {NEED_REASONS.get(unmet[0], 'needs ' + unmet[0])}")
            continue
        skipped_only = False
        measurement = measure(option)
        seconds += measurement.seconds
        if not measurement.ok:
            reasons.append(f"{option.probe}: {measurement.unavailable}")
            continue
        names = option.expect.names()
        measured = {n: measurement.values.get(n) for n in names}
        try:
            held = option.expect.holds(measurement.values)
        except NotEvaluable as missing:
            reasons.append(f"{option.probe}: no value for {missing.name} ({_why_missing(measurement, missing.name)})")
            continue
        except TypeError as err:  # e.g. a text value compared with `below`: the playbook and probe disagree
            reasons.append(f"{option.probe}: cannot compare {measured}: {err}")
            continue
        if measurement.reused:
            reasons.append(f"reused the {option.probe} measurement taken for an earlier node")
        note = "; ".join(reasons)  # why earlier options did not decide, if any
        return NodeResult(node=node.id, status=PASS if held else DEPART, measured=measured,
                          expected=option.expect.describe(), probe=option.probe, seconds=seconds,
                          note=note, measurement=measurement)
    return NodeResult(node=node.id, status=SKIP if skipped_only else ERROR, seconds=seconds,
                      expected=" | ".join(o.expect.describe() for o in node.measure), note="; ".join(reasons))


def _why_missing(measurement: Measurement, name: str) -> str:
    hints = {"producer_cpu_fraction": "too few samples producing batches to tell"}
    return hints.get(name, "not measured for this target")


class Walk:
    """Walks a playbook from its start node to the first departure or a healthy leaf."""

    def __init__(self, playbook: Playbook, capabilities: Callable[[], set[str]],
                 measure: Callable[[MeasureOption], Measurement]):
        self.playbook = playbook
        self.capabilities = capabilities
        self.measure = measure
        self.path: list[NodeResult] = []
        self.current: str | None = playbook.start
        self.departure: Departure | None = None
        self.conclusion: str | None = None
        self.caveat: str = ""  # what a clean or inconclusive verdict does not cover, and why
        self._departed_at: NodeResult | None = None

    @property
    def finished(self) -> bool:
        return self.current is None

    @property
    def verdict(self) -> str:
        if self.departure is not None:
            return DEPARTURE
        # Clean only if every check on the way was measured (or honestly not applicable):
        # a leaf reached past a node that could not measure rules nothing out.
        if self.conclusion is not None and any(r.status == PASS for r in self.path) \
                and not any(r.status == ERROR for r in self.path):
            return CLEAN
        return INCONCLUSIVE

    def run_node(self, node_id: str) -> NodeResult:
        """Measure and judge one node without moving the walk (re-run, jump)."""
        return judge(self.playbook.nodes[node_id], self.capabilities(), self.measure)

    def step(self) -> NodeResult | None:
        """Run the current node, record it, and follow its edge."""
        if self.current is None:
            return None
        node = self.playbook.nodes[self.current]
        result = self.run_node(node.id)
        self.path.append(result)
        if result.status == DEPART and self._departed_at is None:
            self._departed_at = result
        if result.status == PASS:
            edge = node.on_pass
        elif result.status == DEPART:
            edge = node.on_depart
        else:
            edge = node.on_error or node.on_pass
            if edge.kind != "node" and edge.kind != "leaf":
                self._stop_inconclusive(f"{node.id} could not decide the cause: {result.note}")
                return result
        self._follow(edge)
        return result

    def run(self, on_result: Callable[[NodeResult], None] | None = None) -> None:
        while not self.finished:
            result = self.step()
            if on_result is not None and result is not None:
                on_result(result)

    def _stop_inconclusive(self, reason: str) -> None:
        self.caveat = reason
        self.current = None

    def _follow(self, edge: Edge) -> None:
        if edge.kind == "node":
            self.current = edge.target
            return
        self.current = None
        if edge.kind == "leaf":
            self.conclusion = edge.target
            errors = [r for r in self.path if r.status == ERROR]
            skipped = [r.node for r in self.path if r.status == SKIP]
            if skipped and not errors:
                self.caveat = (f"not measured on this target: {', '.join(skipped)} "
                                            "(see each node's note); the clean verdict covers the rest")
            if errors:
                self.caveat = "could not measure " + "; ".join(f"{r.node} ({r.note})" for r in errors)
            elif self.verdict == INCONCLUSIVE:
                self.caveat = "no node could be measured on this target"
            return
        cause = self.playbook.causes[edge.target]
        where = self._departed_at or self.path[-1]
        # The first departure carries what every node from there on measured: the data-wait
        # node says *that* the loop waits, the node after it says *why*.
        start = self.path.index(where)
        measured: dict[str, Any] = {}
        evidence: dict[str, Any] = {}
        values: dict[str, Any] = {}
        for r in self.path[start:]:
            for name, value in r.measured.items():
                measured.setdefault(name, value)
            if r.measurement is not None:
                # The node that measured a value first speaks for it (the loop's own timing
                # over a stack sampler's estimate of the same quantity).
                for name, value in r.measurement.values.items():
                    values.setdefault(name, value)
                evidence[r.node] = r.measurement.evidence
        expected = " ; ".join(r.expected for r in self.path[start:] if r.expected)
        summary = render_template(edge.summary or cause.summary, values)
        self.departure = Departure(node=where.node, cause=cause, measured=measured, expected=expected,
                                   summary=summary, evidence=evidence)


class ProbeRunner:
    """Runs probes for a walk: caches by (probe, params), charges the budget, never raises."""

    def __init__(self, target: Any, budget: float, on_reading: Callable[[dict[str, Any]], None] | None = None):
        import threading
        import time

        from fieldguide.probes.base import ProbeContext

        self._time = time
        self.target = target
        self.budget = budget
        self.spent = 0.0
        self.cache: dict[tuple[str, str], Measurement] = {}
        self.cancelled = threading.Event()
        self._lock = threading.RLock()
        self._depth = 0  # a probe may measure another through us; charge the budget once
        self._running: list[tuple[str, str]] = []  # keys being measured, outermost first
        self._used: dict[tuple[str, str], set[tuple[str, str]]] = {}  # key -> keys it measured through us
        self._context = lambda: ProbeContext(target=target, budget_left=max(self.budget - self.spent, 1.0),
                                             cancelled=self.cancelled, on_reading=on_reading or (lambda r: None),
                                             measure=self.measure_probe)

    def __call__(self, option: MeasureOption) -> Measurement:
        return self.measure_probe(option.probe, option.params)

    def forget(self, probe_id: str | None = None) -> None:
        """Drop cached measurements (re-measure after a fix): all, or one probe's together with
        what it measured through us (torch.flags.outside's stack window, say)."""
        with self._lock:
            if probe_id is None:
                self.cache, self._used = {}, {}
                return
            drop = {k for k in self.cache if k[0] == probe_id}
            drop |= {used for k in drop for used in self._used.get(k, ())}
            self.cache = {k: v for k, v in self.cache.items() if k not in drop}

    def measure_probe(self, probe_id: str, params: dict[str, Any]) -> Measurement:
        probe_cls = registry.get(probe_id)
        merged = {**(probe_cls.params if probe_cls else {}), **params}
        key = (probe_id, repr(sorted(merged.items())))
        with self._lock:
            if self._running:
                self._used.setdefault(self._running[-1], set()).add(key)
            if key in self.cache:
                # Reused: this node spent no time measuring.
                return dataclasses.replace(self.cache[key], seconds=0.0, reused=True)
            if probe_cls is None:
                return Measurement.cannot(probe_id, f"unknown probe {probe_id}")
            if self.spent >= self.budget:
                return Measurement.cannot(probe_id, f"the measurement budget ({self.budget:.0f} s) is spent")
            if not self.target.alive():
                return Measurement.cannot(probe_id, self.target.gone_reason())
            started = self._time.monotonic()
            self._depth += 1
            self._running.append(key)
            try:
                measurement = probe_cls().run(self._context(), **merged)
            except Exception as err:  # a probe bug must not end the walk: it is a reading with its reason
                measurement = Measurement.cannot(probe_id, f"probe failed: {type(err).__name__}: {err}")
            finally:
                self._depth -= 1
                self._running.pop()
            elapsed = self._time.monotonic() - started
            measurement.seconds = measurement.seconds or elapsed
            if self._depth == 0:
                self.spent += elapsed
            if not self.cancelled.is_set():  # a cut-short window must not stand for a full one
                self.cache[key] = measurement
            return measurement
