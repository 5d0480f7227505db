"""Runs probes for a walk: threads, the clock, the cache and the budget (the engine stays pure)."""

from __future__ import annotations

import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.playbook.schema import MeasureOption
from fieldguide.probes import registry
from fieldguide.probes.base import Probe, ProbeContext
from fieldguide.probes.contention import VALUES as CONTENTION_UNITS
from fieldguide.probes.contention import ContentionWindow, margin_factor


class _Flight:
    """A prefetched measurement on its way."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Measurement | None = None


class ProbeRunner:
    """Runs probes for a walk: caches by (probe, params), charges the budget, never raises.

    The walk measures one node at a time; windows the playbook lists under `prefetch` run
    alongside from the walk's start, and the node that asks for one waits only for what is
    left of it (the budget is charged for that wait, not for the window)."""

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
        self._inflight: dict[tuple[str, str], _Flight] = {}
        self._prefetch_stop = threading.Event()
        self.refused_for_budget: list[str] = []  # probes not run because the budget was spent
        self._prefetch_threads: list[threading.Thread] = []
        self._on_reading = on_reading or (lambda r: None)
        self.windows: list[dict[str, Any]] = []  # each window's contention (probes/contention.py)
        self._artifacts: Path | None = None
        self._artifacts_lock = threading.Lock()  # not _lock: a prefetch thread asks while a node waits for it

    def _context(self, pool_with: Measurement | None = None) -> ProbeContext:
        return ProbeContext(target=self.target, budget_left=max(self.budget - self.spent, 1.0),
                            cancelled=self.cancelled, on_reading=self._on_reading, measure=self.measure_probe,
                            forget=self.forget, artifacts=self.artifacts_dir, window_coming=self.window_coming,
                            pool_with=pool_with)

    def _pooled_from(self, probe_id: str, params: dict[str, Any]) -> Measurement | None:
        """For a run with `pooled=N`: the cached window pooled N-1 times, which it extends."""
        pooled = params.get("pooled")
        if not isinstance(pooled, int) or isinstance(pooled, bool) or pooled < 1:
            return None
        earlier = {k: v for k, v in params.items() if k != "pooled"}
        if pooled > 1:
            earlier["pooled"] = pooled - 1
        found = self.cache.get(self._key(probe_id, earlier)[2])
        return found if found is not None and found.ok and found.pool is not None else None

    def window_coming(self, probe_id: str) -> bool:
        """A measurement of this probe (any parameters) is in flight or cached and usable."""
        with self._lock:
            return any(key[0] == probe_id for key in self._inflight) or any(
                key[0] == probe_id and m.ok for key, m in self.cache.items())

    def measured(self) -> list[tuple[tuple[str, str], Measurement]]:
        """Every measurement taken so far, prefetched windows no node adopted included."""
        with self._lock:
            done = [(key, f.result) for key, f in self._inflight.items() if f.done.is_set() and f.result is not None]
            return list(self.cache.items()) + done

    def artifacts_dir(self) -> Path:
        """The walk's folder for files a viewer opens, made when a probe first keeps one (private:
        stacks and traces show the job's code). It outlives the walk: the report points into it,
        or at its copy beside the report."""
        with self._artifacts_lock:
            if self._artifacts is None:
                self._artifacts = Path(tempfile.mkdtemp(prefix="fieldguide-artifacts-"))
            return self._artifacts

    def discard_artifacts(self) -> None:
        """Remove the walk's folder of files for viewers, once a written report keeps its copies."""
        import shutil

        with self._artifacts_lock:
            if self._artifacts is not None:
                shutil.rmtree(self._artifacts, ignore_errors=True)
                self._artifacts = None

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

    @staticmethod
    def _key(probe_id: str, params: dict[str, Any]) -> tuple[type[Probe] | None, dict[str, Any], tuple[str, str]]:
        probe_cls = registry.get(probe_id)
        merged = {**(probe_cls.params if probe_cls else {}), **params}
        return probe_cls, merged, (probe_id, repr(sorted(merged.items())))

    # -- prefetch --------------------------------------------------------------------------
    def prefetch(self, options: tuple[MeasureOption, ...], capabilities: set[str]) -> None:
        """Start these measurements now, each in its own thread (needs unmet: not started)."""
        for option in options:
            probe_cls, merged, key = self._key(option.probe, option.params)
            if probe_cls is None or probe_cls.unmet_needs(capabilities):
                continue
            with self._lock:
                if key in self.cache or key in self._inflight:
                    continue
                flight = self._inflight[key] = _Flight()
            thread = threading.Thread(target=self._run_prefetch, args=(probe_cls, merged, key, flight),
                                      name=f"fieldguide-prefetch-{option.probe}", daemon=True)
            self._prefetch_threads.append(thread)
            thread.start()

    def _run_prefetch(self, probe_cls: Any, merged: dict[str, Any], key: tuple[str, str], flight: _Flight) -> None:
        """On its own thread, taking no lock: the node that asks adopts the result (a walk
        thread may hold the runner's lock while it waits for this one)."""
        context = ProbeContext(target=self.target, budget_left=max(self.budget - self.spent, 1.0),
                               cancelled=self._prefetch_stop, measure=None, artifacts=self.artifacts_dir)
        window = self._contention()
        try:
            flight.result = probe_cls().run(context, **merged)
        except Exception as err:
            flight.result = Measurement.cannot(key[0], f"probe failed: {type(err).__name__}: {err}")
        self._record_contention(flight.result, window)
        flight.done.set()

    def _contention(self) -> ContentionWindow | None:
        try:
            return ContentionWindow(self.target.pid)
        except Exception:  # /proc unreadable here: the window carries no contention reading
            return None

    def _record_contention(self, measurement: Measurement, window: ContentionWindow | None) -> None:
        """The machine's contention during the window, in the measurement's values (a probe's
        own value of the same name, if any, stands)."""
        if window is None or not measurement.ok:
            return
        try:
            reading = window.finish()
        except Exception:
            return
        measurement.contention = reading
        self.windows.append(reading)
        # A share of a step the job spent waiting for a core is less certain than its samples say.
        factor = 1.0 if measurement.contention_in_margins else margin_factor(reading)
        measurement.margins = {name: round(m * factor, 4) for name, m in measurement.margins.items()}
        for name, value in reading.items():
            measurement.values.setdefault(name, value)
            measurement.units.setdefault(name, CONTENTION_UNITS[name])

    def stop_prefetch(self, wait: float = 10.0) -> None:
        """Cut prefetched windows short (the walk is over) and wait for their threads."""
        self._prefetch_stop.set()
        for thread in self._prefetch_threads:
            thread.join(timeout=wait)

    def _await_flight(self, probe_id: str, key: tuple[str, str], flight: _Flight) -> Measurement | None:
        """Wait for a prefetched window; None if it did not give a usable measurement."""
        started = self._time.monotonic()
        self._on_reading({"probe": probe_id, "status": "its window started with the walk: waiting for the rest"})
        while not flight.done.wait(0.1):
            if self.cancelled.is_set():
                return Measurement.cannot(probe_id, "cancelled")
        if self._depth == 0:
            self.spent += self._time.monotonic() - started
        result = flight.result
        return result if result is not None and result.ok else None

    # -- measuring ------------------------------------------------------------------------
    def peek(self, option: MeasureOption) -> Measurement | None:
        """What is already measured for this option, without measuring or waiting: a cached
        reading, or a prefetched window that has finished."""
        _, _, key = self._key(option.probe, option.params)
        with self._lock:
            if key in self.cache:
                return self.cache[key]
            flight = self._inflight.get(key)
        return flight.result if flight is not None and flight.done.is_set() else None

    def measure_probe(self, probe_id: str, params: dict[str, Any]) -> Measurement:
        probe_cls, merged, key = self._key(probe_id, params)
        with self._lock:
            flight = self._inflight.get(key)
        if flight is not None:
            waited = self._await_flight(probe_id, key, flight)
            if waited is not None and not waited.ok:
                return waited  # cancelled
            with self._lock:
                self._inflight.pop(key, None)
                if waited is not None:
                    # Measured in the background for this node: not a reuse.
                    self.cache[key] = waited
                    if self._running:
                        self._used.setdefault(self._running[-1], set()).add(key)
                    return waited
        with self._lock:
            if self._running:
                self._used.setdefault(self._running[-1], set()).add(key)
            if key in self.cache:
                # Reused: this node spent no time measuring.
                return dataclasses.replace(self.cache[key], seconds=0.0, reused=True)
            if probe_cls is None:
                return Measurement.cannot(probe_id, f"unknown probe {probe_id}")
            if self.spent >= self.budget:
                if probe_id not in self.refused_for_budget:
                    self.refused_for_budget.append(probe_id)
                return Measurement.cannot(probe_id, f"the measurement budget ({self.budget:.0f} s) is spent")
            if not self.target.alive() and not probe_cls.reads_history:
                # Not a failure to measure: the target ended; what it left is judged by the
                # probes that read its recorded history.
                return Measurement.cannot(probe_id, self.target.gone_reason(), applicable=False)
            started = self._time.monotonic()
            self._depth += 1
            self._running.append(key)
            window = self._contention()
            try:
                measurement = probe_cls().run(self._context(self._pooled_from(probe_id, params)), **merged)
            except Exception as err:  # a probe bug must not end the walk: it is a reading with its reason
                measurement = Measurement.cannot(probe_id, f"probe failed: {type(err).__name__}: {err}")
            finally:
                self._depth -= 1
                self._running.pop()
            self._record_contention(measurement, window)
            elapsed = self._time.monotonic() - started
            measurement.seconds = measurement.seconds or elapsed
            if not measurement.ok and not self.target.alive():
                measurement.applicable = False  # the target ended under it: not a failure to measure
            if self._depth == 0:
                self.spent += elapsed
            if not self.cancelled.is_set():  # a cut-short window must not stand for a full one
                self.cache[key] = measurement
            return measurement
