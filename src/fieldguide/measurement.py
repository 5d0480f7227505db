"""The Measurement: what one probe run found, or why it could not find it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Value = Any  # float | int | bool | str | None | list of those


@dataclass
class Measurement:
    """Named values with units, the evidence behind them, and where they came from.

    `unavailable` carries the reason when the probe could not measure (no GPU,
    ptrace denied, target gone); values are then empty, never invented.
    """

    probe: str
    values: dict[str, Value] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    # Evidence: top stacks, per-step series, raw samples; small and JSON-able.
    evidence: dict[str, Any] = field(default_factory=dict)
    provenance: str = ""
    seconds: float = 0.0
    unavailable: str | None = None
    # With `unavailable`: False when the probe does not apply to this target (it ended before
    # the probe could run, say), which a walk records as skipped rather than failed.
    applicable: bool = True
    # Values the probe declares but could not give, with why ("too few samples to tell").
    missing: dict[str, str] = field(default_factory=dict)
    reused: bool = False  # served from the walk's cache: another node already measured it
    # How contended the CPUs were during the window (probes/contention.py), set by the runner.
    contention: dict[str, Any] = field(default_factory=dict)
    # A value's uncertainty (name -> ± in the value's unit), where the probe can state it: the
    # engine re-measures or declines to judge a reading that close to its threshold.
    margins: dict[str, float] = field(default_factory=dict)
    # The margins already weigh the window's contention (the probe read it itself): the runner
    # does not widen them again.
    contention_in_margins: bool = False
    # The raw samples behind the values, for a probe that `pools` a later window with this one
    # (a reading too close to its threshold gets more samples, not a fresh window). Never written.
    pool: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.unavailable is None

    @classmethod
    def cannot(cls, probe: str, reason: str, *, provenance: str = "", seconds: float = 0.0,
               applicable: bool = True) -> Measurement:
        return cls(probe=probe, provenance=provenance, seconds=seconds, unavailable=reason, applicable=applicable)

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "values": self.values,
            "units": self.units,
            "evidence": self.evidence,
            "provenance": self.provenance,
            "seconds": round(self.seconds, 3),
            "unavailable": self.unavailable,
            **({"missing": self.missing} if self.missing else {}),
            **({"margins": self.margins} if self.margins else {}),
        }


def format_value(value: Value, unit: str = "") -> str:
    """A value as a person reads it: fractions as percent, floats to 3 significant digits."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if unit == "fraction":
            return f"{value:.0%}" if abs(value) >= 0.01 or value == 0 else f"{value:.1%}"
        text = f"{value:.3g}"
        return f"{text} {unit}".strip()
    if isinstance(value, int):
        return f"{value} {unit}".strip()
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v, unit) for v in value[:8]) + (", …]" if len(value) > 8 else "]")
    return f"{value} {unit}".strip()
