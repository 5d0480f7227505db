"""Replay a recorded real walk (fixtures/demo_walk.json) through the real Session, Walk and
ProbeRunner caching, for deterministic SVG snapshots. Only the probes' measuring is replaced:
each (probe, params) returns what the real run measured, and its last live reading is replayed.

Behaviour tests do not use this: they drive the real app on the real demo workload.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldguide.frontends.tui.driver import SessionFactory
from fieldguide.frontends.tui.model import TargetSpec
from fieldguide.measurement import Measurement
from fieldguide.playbook import Playbook
from fieldguide.targets import Target
from fieldguide.walk.engine import Walk
from fieldguide.walk.runner import ProbeRunner
from fieldguide.walk.session import Session

FIXTURE = Path(__file__).with_name("fixtures") / "demo_walk.json"


def load(path: Path = FIXTURE) -> dict[str, Any]:
    return json.loads(path.read_text())


class ReplayTarget(Target):
    """Looks like the recorded launched job; has no process (so nothing samples or ends it)."""

    kind = "launch"

    def __init__(self, data: dict[str, Any]) -> None:
        self._describe = dict(data["target"])
        self._capabilities = set(data["capabilities"])

    def capabilities(self) -> set[str]:
        return set(self._capabilities)

    def describe(self) -> dict[str, Any]:
        return dict(self._describe)


def _key(probe_id: str, params: dict[str, Any]) -> tuple[str, str]:
    return probe_id, repr(sorted(params.items()))


class ReplayRunner(ProbeRunner):
    """A ProbeRunner whose probes return the recorded Measurements. `hold`: a probe id that,
    once its half-way reading is shown, waits until cancelled (a walk caught mid-probe)."""

    def __init__(self, target: Target, data: dict[str, Any], on_reading: Callable[[dict[str, Any]], None],
                 hold: str | None = None) -> None:
        super().__init__(target, budget=45.0, on_reading=on_reading)
        self.on_reading = on_reading
        self.hold = hold
        self.recorded = {_key(m["probe"], m["params"]): m["measurement"] for m in data["measurements"]}
        self.readings: dict[str, dict[str, Any]] = data["readings"]

    def measure_probe(self, probe_id: str, params: dict[str, Any]) -> Measurement:
        key = _key(probe_id, params)
        with self._lock:
            if key in self.cache:
                return dataclasses.replace(self.cache[key], seconds=0.0, reused=True)
        raw = self.recorded.get(key)
        if raw is None:
            return Measurement.cannot(probe_id, "not in the recording")
        reading = self.readings.get(probe_id)
        if reading is not None:
            if probe_id == self.hold:  # half-way: half the time, the first half of each series
                series = reading.get("series") or {}
                reading = {**reading, "elapsed": reading.get("of", 6.0) / 2,
                           "series": {k: v[: len(v) // 2] for k, v in series.items()}}
            self.on_reading(dict(reading))
        if probe_id == self.hold:
            self.cancelled.wait()
            return Measurement.cannot(probe_id, "cancelled")
        fields = {k: raw[k] for k in ("probe", "values", "units", "evidence", "provenance", "seconds", "unavailable")}
        measurement = Measurement(**fields)
        with self._lock:
            self.spent += measurement.seconds
            self.cache[key] = measurement
        return measurement


def replay_factory(path: Path = FIXTURE, hold: str | None = None) -> SessionFactory:
    data = load(path)

    def factory(spec: TargetSpec, playbook: Playbook, on_reading: Callable[[dict[str, Any]], None],
                echo: Callable[[str], None]) -> Session:
        target = ReplayTarget(data)
        session = Session(playbook, target, on_reading=on_reading)
        session.runner = ReplayRunner(target, data, on_reading, hold=hold)
        session.walk = Walk(playbook, target.capabilities, session.runner)
        return session

    return factory
