"""Runs probes for a walk: threads, the clock, the cache and the budget (the engine stays pure)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.playbook.schema import MeasureOption
from fieldguide.probes import registry
from fieldguide.probes.base import ProbeContext


class ProbeRunner:
    """Runs probes for a walk: caches by (probe, params), charges the budget, never raises."""

    def __init__(self, target: Any, budget: float, on_reading: Callable[[dict[str, Any]], None] | None = None):
        self._time: Any = time  # the clock (tests pass a fake with .monotonic())
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
            if not self.target.alive() and not probe_cls.reads_history:
                # Not a failure to measure: the target ended; what it left is judged by the
                # probes that read its recorded history.
                return Measurement.cannot(probe_id, self.target.gone_reason(), applicable=False)
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
            if not measurement.ok and not self.target.alive():
                measurement.applicable = False  # the target ended under it: not a failure to measure
            if self._depth == 0:
                self.spent += elapsed
            if not self.cancelled.is_set():  # a cut-short window must not stand for a full one
                self.cache[key] = measurement
            return measurement
