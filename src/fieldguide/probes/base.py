"""The probe interface: small classes with class-level metadata and one `run`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from fieldguide.measurement import Measurement
from fieldguide.probes.evidence import EvidenceKind, undeclared

if TYPE_CHECKING:
    from fieldguide.targets import Target

# What a probe may need from its target; the engine skips a probe whose needs are unmet.
NEEDS_PROCESS = "process"  # a live process (attach or launch)
NEEDS_AGENT = "agent"  # the in-process agent (launch mode)
NEEDS_GPU = "gpu"
NEEDS_LAUNCH = "launch"  # a job fieldguide launched, so that it can relaunch it (an experiment)


@dataclass
class ProbeContext:
    """What a running probe can reach: the target, the clock, cancellation, live readings."""

    target: Target
    budget_left: float = 60.0
    cancelled: threading.Event = field(default_factory=threading.Event)
    # Called with small dicts of live readings (the TUI draws them); must be cheap and thread-safe.
    on_reading: Callable[[dict[str, Any]], None] = lambda reading: None
    # Measures another probe through the walk's cache (so one py-spy window serves many nodes).
    measure: Callable[[str, dict[str, Any]], Measurement] | None = None
    # Drops a cached reading that no longer stands for the job (a window taken in an evaluation).
    forget: Callable[[str], None] | None = None
    # Where a probe keeps files for the usual viewers (a speedscope profile, a Perfetto trace):
    # the walk's own folder, copied beside the report when one is written. None: keep nothing.
    artifacts: Callable[[], Path] | None = None
    # Whether this walk has a window of the named probe (default parameters) measured or on its
    # way: a probe skips work that window will answer (the job pays for every sample taken).
    window_coming: Callable[[str], bool] = lambda probe_id: False
    # For a probe that `pools`, run with `pooled=N`: its window pooled N-1 times (the first window
    # itself for N=1), whose samples this run adds to. None: there is none to add to.
    pool_with: Measurement | None = None

    def sleep(self, seconds: float) -> bool:
        """Sleep unless cancelled or the target died; False means stop measuring."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.cancelled.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
                return False
            if not self.target.alive():
                return False
        return True


def stack_window(ctx: ProbeContext) -> dict[str, Any] | None:
    """The walk's stack window (prefetched beside the first nodes, so no extra time): what the
    training thread does over whole steps, seen from outside as attach mode sees it."""
    if ctx.measure is None:
        return None
    window = ctx.measure("stacks.sample", {})
    return window.values if window.ok else None


class Probe:
    """Measures one thing about a target for a bounded time.

    Subclasses set `id` (stable, used by playbooks), `title`, `needs`, `params`
    (name -> default, whose type is the parameter's type) and `values`
    (name -> unit, the named values `run` returns), and implement `run`.
    """

    id: ClassVar[str]
    title: ClassVar[str]
    needs: ClassVar[frozenset[str]] = frozenset()
    params: ClassVar[dict[str, Any]] = {}
    values: ClassVar[dict[str, str]] = {}
    # Live series the probe streams while it measures (name -> unit), drawn by the TUI as it
    # comes; the first two are the headline pair (e.g. step time and the wait inside it).
    series: ClassVar[dict[str, str]] = {}
    # Values that are the parts of one whole (fractions summing to about 1), drawn as bars where
    # the probe's evidence is shown (a breakdown of memory by category).
    parts: ClassVar[tuple[str, ...]] = ()
    # The evidence kinds (probes/evidence.py) the probe may leave beside its values: a report
    # draws the kinds it shows (a table of what the node found, the top stacks), the JSON keeps all.
    evidence_kinds: ClassVar[tuple[EvidenceKind[Any], ...]] = ()
    # Whether the probe can judge a target that has ended, from what was recorded while it
    # ran (the agent's streams); other probes are not run on an ended target.
    reads_history: ClassVar[bool] = False
    # A later window's samples add to an earlier one's (`run(..., pooled=N)` with ctx.pool_with):
    # a reading too close to its threshold is extended by one more window, not measured afresh
    # over twice the time.
    pools: ClassVar[bool] = False

    # Each probe defines `run(self, ctx, <its params as keyword arguments>) -> Measurement`;
    # declared as a callable attribute so that subclasses may name their own parameters.
    run: Callable[..., Measurement]

    def reading(self, ctx: ProbeContext, *, elapsed: float | None = None, of: float | None = None,
                status: str | None = None, series: dict[str, list[float]] | None = None,
                values: dict[str, Any] | None = None) -> None:
        """Stream a live reading: progress, a status line, declared series, interim values.

        The shape is the same for every probe, so a view needs no probe's names: it reads
        `series` and `values` against the probe's declared `series` and `values` units."""
        reading: dict[str, Any] = {"probe": self.id}
        if elapsed is not None:
            reading["elapsed"], reading["of"] = elapsed, of
        if status:
            reading["status"] = status
        if series:
            reading["series"] = series
        if values:
            reading["values"] = values
        ctx.on_reading(reading)

    def measurement(self, **kwargs: Any) -> Measurement:
        extra = undeclared(kwargs.get("evidence") or {}, self.evidence_kinds)
        if extra:  # a seam: every view reads evidence by its declared kind
            raise TypeError(f"probe {self.id} left evidence it does not declare: {', '.join(extra)}")
        units = {k: v for k, v in self.values.items() if v}
        return Measurement(probe=self.id, units=units, **kwargs)

    def cannot(self, reason: str, **kwargs: Any) -> Measurement:
        return Measurement.cannot(self.id, reason, **kwargs)

    @classmethod
    def unmet_needs(cls, capabilities: set[str]) -> list[str]:
        """Unmet needs, the most basic first (no process at all says more than no agent)."""
        order = {NEEDS_PROCESS: 0, NEEDS_LAUNCH: 1, NEEDS_AGENT: 2, NEEDS_GPU: 3}
        return sorted((n for n in cls.needs if n not in capabilities), key=lambda n: (order.get(n, 9), n))


NEED_REASONS = {
    NEEDS_AGENT: "needs the in-process agent, which only a launched target has (fieldguide diagnose -- CMD)",
    NEEDS_PROCESS: "needs a target process (--pid or -- CMD)",
    NEEDS_GPU: "needs an NVIDIA GPU visible through NVML",
    NEEDS_LAUNCH: "needs a job fieldguide launched, to relaunch it for the experiment (fieldguide diagnose -- CMD); "
                  "an attached job is never paused or restarted",
}
