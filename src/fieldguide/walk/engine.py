"""The walk: a node's expectation applied to a Measurement gives a verdict; edges give the next node.

Pure logic: measuring is delegated to a `measure(option) -> Measurement`
callable (the ProbeRunner of runner.py in real walks, constructed measurements in
tests). The engine knows probe ids, never their value names: why a value is
missing travels in the Measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.playbook.expect import CalibrationLookup, NotEvaluable
from fieldguide.playbook.schema import Cause, Edge, MeasureOption, Node, Playbook, render_template
from fieldguide.probes import registry
from fieldguide.probes.base import NEED_REASONS
from fieldguide.probes.contention import oversubscribed

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
    # Skipped because the reading stayed within its uncertainty of the threshold: not judged,
    # and a walk past it cannot be called clean.
    undecided: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "measured": self.measured, "expected": self.expected,
                "probe": self.probe, "seconds": round(self.seconds, 3), "note": self.note,
                **({"undecided": True} if self.undecided else {})}


@dataclass
class Departure:
    node: str
    cause: Cause
    measured: dict[str, Any]
    expected: str
    summary: str
    evidence: dict[str, Any]
    # The share of the step the departed node measured (its `share` value), and where it is spent.
    share: float | None = None
    share_name: str | None = None
    at: str | None = None
    chain: tuple[str, ...] = ()  # the departed node and the nodes that named its cause


# Two readings of one fraction further apart than this are worth a word in the node's note.
CROSS_CHECK_MARGIN = 0.2


def cross_check(node: Node, decided: int, measured: dict[str, Any],
                peek: Callable[[MeasureOption], Measurement | None] | None) -> str:
    """What the node's later options already measured (a prefetched window, an earlier node's
    reading: nothing is measured for this) that reads the deciding values differently."""
    if peek is None:
        return ""
    said = []
    deciding = node.measure[decided].probe
    for option in node.measure[decided + 1:]:
        other = peek(option)
        if other is None or not other.ok or option.probe == deciding:
            continue
        for name, value in measured.items():
            seen = other.values.get(name)
            if isinstance(value, (int, float)) and isinstance(seen, (int, float)) \
                    and not isinstance(value, bool) and abs(value - seen) > CROSS_CHECK_MARGIN:
                said.append(f"cross-check: {option.probe} read {name} {seen:.2f} against {value:.2f}; judged on "
                            f"{deciding}, which the playbook lists first for what it sees")
    return "; ".join(said)


def judge(node: Node, capabilities: set[str], measure: Callable[[MeasureOption], Measurement],
          calibration: CalibrationLookup | None = None,
          peek: Callable[[MeasureOption], Measurement | None] | None = None) -> NodeResult:
    """Decide one node: the first measure option that can measure and be evaluated decides.

    Thresholds that refer to the calibration are resolved with `calibration` (None: there is
    none, and they fall back to the playbook's fixed numbers, which the note then says).
    `peek` gives what a later option has already measured, for the note's cross-check."""
    reasons: list[str] = []
    skipped_only = True  # every option was not applicable here: the node is skipped, not failed
    seconds = 0.0
    expectations = {id(o): o.expect.resolve(calibration) for o in node.measure}
    for index, option in enumerate(node.measure):
        expect, thresholds = expectations[id(option)]
        probe_cls = registry.get(option.probe)
        assert probe_cls is not None, option.probe  # validated at load time
        unmet = probe_cls.unmet_needs(capabilities)
        if unmet:
            reasons.append(f"{option.probe} {NEED_REASONS.get(unmet[0], 'needs ' + unmet[0])}")
            continue
        measurement = measure(option)
        seconds += measurement.seconds
        if not measurement.ok:
            skipped_only = skipped_only and not measurement.applicable
            reasons.append(f"{option.probe}: {measurement.unavailable}")
            continue
        skipped_only = False
        names = expect.names()
        measured = {n: measurement.values.get(n) for n in names}
        try:
            held = expect.holds(measurement.values)
        except NotEvaluable as missing:
            why = measurement.missing.get(missing.name, "not measured for this target")
            reasons.append(f"{option.probe}: no value for {missing.name} ({why})")
            continue
        except TypeError as err:  # e.g. a text value compared with `below`: the playbook and probe disagree
            reasons.append(f"{option.probe}: cannot compare {measured}: {err}")
            continue
        if measurement.reused:
            reasons.append(f"reused the {option.probe} measurement taken for an earlier node")
        close = expect.straddles(measurement.values, measurement.margins)
        if close:
            first = _plus_minus(close[0], measured, measurement.margins)
            longer = None
            for pooled in range(1, MAX_POOLED + 1 if probe_cls.pools else 2):
                again = _measure_longer(option, probe_cls, measure, pooled)
                if again is None:
                    break
                seconds += again.seconds
                held_again = _holds(expect, again)
                if held_again is None:
                    break
                measurement, held = again, held_again
                measured = {n: again.values.get(n) for n in names}
                close = expect.straddles(again.values, again.margins)
                longer = ("the longer window an earlier node already took" if again.reused
                          else f"measured again over {again.seconds:.0f} s" if not probe_cls.pools
                          else f"measured again, {pooled + 1} windows pooled{_pooled_seconds(again)}")
                if not close:
                    break
            if longer is not None:
                reasons.append(f"{longer}: the first window's {first} was within its uncertainty of the threshold")
            if close:
                return NodeResult(node=node.id, status=SKIP, measured=measured, expected=expect.describe(),
                                  probe=option.probe, seconds=seconds, measurement=measurement, undecided=True,
                                  note="; ".join([*reasons, _too_close(close, measured, measurement)]))
        # Why earlier options did not decide, if any; where calibrated thresholds came from.
        checked = cross_check(node, index, measured, peek)
        note = "; ".join([*reasons, *thresholds, *([checked] if checked else [])])
        return NodeResult(node=node.id, status=PASS if held else DEPART, measured=measured,
                          expected=expect.describe(), probe=option.probe, seconds=seconds,
                          note=note, measurement=measurement)
    return NodeResult(node=node.id, status=SKIP if skipped_only else ERROR, seconds=seconds,
                      expected=" | ".join(e.describe() for e, _ in expectations.values()), note="; ".join(reasons))


def _holds(expect: Any, measurement: Measurement) -> bool | None:
    """The expectation's outcome on this measurement, or None where it cannot be evaluated."""
    if not measurement.ok:
        return None
    try:
        return bool(expect.holds(measurement.values))
    except (NotEvaluable, TypeError):
        return None


# A pooling probe's close reading is extended by up to this many windows of its own length (four
# windows in all); another probe's is measured once more over twice its window.
MAX_POOLED = 3


def _measure_longer(option: MeasureOption, probe_cls: Any, measure: Callable[[MeasureOption], Measurement],
                    pooled: int) -> Measurement | None:
    """The option's window extended: pooled with `pooled` more windows where its probe pools
    samples, else measured again over twice its window; None where its probe has no window."""
    seconds = {**probe_cls.params, **option.params}.get("seconds")
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    params = ({**option.params, "pooled": pooled} if probe_cls.pools
              else {**option.params, "seconds": seconds * 2})
    return measure(MeasureOption(probe=option.probe, params=params, expect=option.expect))


def _pooled_seconds(measurement: Measurement) -> str:
    """The seconds of samples a pooled window holds, where it says (its run's are the last window's)."""
    seconds = getattr(measurement.pool, "seconds", None)
    return f", {seconds:.0f} s of samples in all" if isinstance(seconds, (int, float)) else ""


def _plus_minus(name: str, measured: dict[str, Any], margins: dict[str, float]) -> str:
    value, margin = measured.get(name), margins.get(name, 0.0)
    return f"{name} {value:.3g} ± {margin:.2g}" if isinstance(value, (int, float)) else name


def _too_close(names: list[str], measured: dict[str, Any], measurement: Measurement) -> str:
    """Why a node was not judged, with the numbers: the reading, its uncertainty, the machine."""
    readings = ", ".join(_plus_minus(n, measured, measurement.margins) for n in names)
    busy = measurement.contention
    if oversubscribed(busy):
        wait, load = busy.get("cpu_wait_fraction"), busy.get("load_per_core")
        machine = " on a machine this busy (a thread of the job waited " + (
            f"{wait:.0%} of the window for a core" if wait is not None else "for cores") + (
            f", load {load:.2g} per core)" if load is not None else ")")
        return f"too close to call{machine}: {readings}"
    return f"too close to call: {readings}, within its uncertainty of the threshold after a longer window"


class Walk:
    """Walks a playbook from its start node to the first departure or a healthy leaf."""

    def __init__(self, playbook: Playbook, capabilities: Callable[[], set[str]],
                 measure: Callable[[MeasureOption], Measurement],
                 calibration: Callable[[], CalibrationLookup | None] | None = None):
        self.playbook = playbook
        # Where this machine's calibration comes from (the session reads `fieldguide calibrate`'s
        # cache), asked once, when a node first needs it; None: fixed thresholds only.
        self._calibration_source = calibration
        self._calibration: CalibrationLookup | None = None
        self.capabilities = capabilities
        self.measure = measure
        self.path: list[NodeResult] = []
        self.current: str | None = playbook.start
        self.departure: Departure | None = None
        # Every other departure the walk named (share nodes go on past theirs), largest share first.
        self.also: list[Departure] = []
        self._named: list[Departure] = []
        self.conclusion: str | None = None
        self.caveat: str = ""  # what a clean or inconclusive verdict does not cover, and why
        self._departed_at: NodeResult | None = None
        # Where the walk goes on once the share node that departed has its cause (its pass edge).
        self._resume: Edge | None = None
        self._share_node: Node | None = None
        self._unnamed: list[str] = []  # share nodes that departed and whose cause could not be named

    @property
    def finished(self) -> bool:
        return self.current is None

    @property
    def verdict(self) -> str:
        if self.departure is not None:
            return DEPARTURE
        if self._departed_at is not None or self._unnamed:
            # A node departed, and the nodes after it named no cause: that is not clean.
            return INCONCLUSIVE
        # Clean only if every check on the way was measured (or honestly not applicable):
        # a leaf reached past a node that could not measure rules nothing out.
        if self.conclusion is not None and any(r.status == PASS for r in self.path) \
                and not any(r.status == ERROR or r.undecided for r in self.path):
            return CLEAN
        return INCONCLUSIVE

    def run_node(self, node_id: str) -> NodeResult:
        """Measure and judge one node without moving the walk (re-run, jump)."""
        node = self.playbook.nodes[node_id]
        calibration = self.calibration() if any(o.expect.calibrated() for o in node.measure) else None
        return judge(node, self.capabilities(), self.measure, calibration, getattr(self.measure, "peek", None))

    def calibration(self) -> CalibrationLookup | None:
        if self._calibration_source is not None:  # asked once
            self._calibration, self._calibration_source = self._calibration_source(), None
        return self._calibration

    def step(self, stop: Callable[[], bool] = lambda: False) -> NodeResult | None:
        """Run the current node, record it, and follow its edge. A node that could not measure
        because the walk was stopped meanwhile (`stop()`) is neither recorded nor followed: it was
        cut short, not judged, and the walk stays on it."""
        if self.current is None:
            return None
        node = self.playbook.nodes[self.current]
        result = self.run_node(node.id)
        if result.status == ERROR and stop():
            return None
        self.path.append(result)
        if result.status == DEPART and self._departed_at is None:
            self._departed_at = result
            if node.share and self._resume is None:
                self._resume, self._share_node = node.on_pass, node
        if result.status == PASS:
            edge = node.on_pass
        elif result.status == DEPART:
            edge = node.on_depart
            if edge.kind == "stop":  # what was measured puts the target outside this playbook
                values = result.measurement.values if result.measurement is not None else result.measured
                self._stop_inconclusive(render_template(edge.target, values))
                return result
        else:
            edge = node.on_error or node.on_pass
            if edge.kind == "stop" or (edge.kind != "node" and edge.kind != "leaf"):
                why = f"{edge.target}: {result.note}" if edge.kind == "stop" else \
                    f"{node.id} could not decide the cause: {result.note}"
                if self._resume is not None:  # a share departed and its cause is unknown: survey on
                    self._unnamed.append(why)
                    self._go_on()
                    return result
                self._stop_inconclusive(why)
                return result
        self._follow(edge)
        return result

    def _go_on(self) -> None:
        """Past a share node's departure (named or not): on along its pass edge, as if it passed."""
        edge = self._resume
        assert edge is not None
        self._resume, self._share_node, self._departed_at = None, None, None
        self._follow(edge)

    def _finish(self) -> None:
        """The walk is over with departures named: the largest share first, the others after it.
        A departure of a node that measures no share (a switch, a straggler) ends the walk and comes first."""
        best: dict[str, Departure] = {}  # one departure per cause: the larger share of two
        for d in self._named:
            if d.cause.id not in best or (d.share or 0.0) > (best[d.cause.id].share or 0.0):
                best[d.cause.id] = d
        ranked = sorted(best.values(), key=lambda d: -1.0 if d.share is None else -d.share)
        self.departure, self.also = ranked[0], ranked[1:]
        self.current = None
        if self._unnamed:  # a share that departed without a cause is said, not dropped
            said = "also departing, its cause not named: " + "; ".join(self._unnamed)
            self.caveat = f"{self.caveat}; {said}" if self.caveat else said

    def run(self, on_result: Callable[[NodeResult], None] | None = None,
            stop: Callable[[], bool] = lambda: False) -> None:
        """Step to the end, or until `stop()` (a cancelled walk ends after the node it was in)."""
        while not self.finished and not stop():
            result = self.step(stop)
            if on_result is not None and result is not None:
                on_result(result)
        if not self.finished and self._named:  # cut short: the causes named so far stand
            self.caveat = "the walk was cut short: shares after the last node walked were not measured"
            self._finish()

    def _stop_inconclusive(self, reason: str) -> None:
        self.caveat = reason
        self.current = None
        if self._named:  # causes already named stand; the reason the walk went no further is said
            self._finish()

    def _follow(self, edge: Edge) -> None:
        if edge.kind == "node":
            self.current = edge.target
            return
        self.current = None
        if edge.kind == "leaf" and self._named:
            self._finish()  # the shares that departed are the verdict, not the leaf past them
            return
        if edge.kind == "leaf":
            self.conclusion = edge.target
            errors = [r for r in self.path if r.status == ERROR]
            undecided = [r for r in self.path if r.undecided]
            skipped = [r.node for r in self.path if r.status == SKIP and not r.undecided]
            if skipped and not errors:
                self.caveat = (f"not measured on this target: {', '.join(skipped)} "
                                            "(see each node's note); the clean verdict covers the rest")
            if self._departed_at is not None:
                self.caveat = (f"{self._departed_at.node} departed from its expectation "
                               f"({self._departed_at.expected}), but the nodes after it named no cause")
            elif self._unnamed:
                self.caveat = "a share of the step departed, but its cause was not named: " + "; ".join(self._unnamed)
            elif errors:
                self.caveat = "could not measure " + "; ".join(f"{r.node} ({r.note})" for r in errors)
            elif undecided:
                self.caveat = "not judged, " + "; ".join(f"{r.node}: {r.note.rsplit('; ', 1)[-1]}" for r in undecided)
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
                    if value is not None:  # a probe that could not tell does not speak for a value
                        values.setdefault(name, value)
                evidence[r.node] = r.measurement.evidence
        expected = " ; ".join(r.expected for r in self.path[start:] if r.expected)
        summary = render_template(edge.summary or cause.summary, values)
        share_node = self._share_node
        share = values.get(share_node.share) if share_node is not None and share_node.share else None
        at = values.get(share_node.share_at) if share_node is not None and share_node.share_at else None
        self._named.append(Departure(
            node=where.node, cause=cause, measured=measured, expected=expected, summary=summary, evidence=evidence,
            share=float(share) if isinstance(share, (int, float)) and not isinstance(share, bool) else None,
            share_name=share_node.share if share_node is not None else None,
            at=str(at) if at else None, chain=tuple(r.node for r in self.path[start:])))
        if self._resume is not None:  # a share node's cause: the survey goes on past it
            self._go_on()
            return
        self._finish()
