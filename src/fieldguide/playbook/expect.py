"""Declarative expectations over a Measurement's named values.

A playbook writes `data_wait_fraction: {below: 0.1}`; several keys must all
hold; `all:` and `any:` combine lists. There is no eval and no shell: a
playbook from a colleague is safe to open.

A numeric threshold may instead come from this machine's calibration
(`fieldguide calibrate`): `median_kernel_us: {at_least: {calibrated: gpu_launch_us,
times: 2, fallback: 10}}` is 2 × the calibrated value, or 10 where there is none.
The engine resolves it at walk time (`Expectation.resolve`) and says which it used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

# Said in a node's note when a calibrated threshold fell back to the playbook's fixed one.
NO_CALIBRATION = "fixed threshold: no calibration for this machine (run fieldguide calibrate)"
# name -> (value, where it comes from) or (None, why there is none); None: no calibration at all.
CalibrationLookup = Callable[[str], tuple[float | None, str]]

OPERATORS: dict[str, str] = {
    "below": "<",
    "above": ">",
    "at_most": "<=",
    "at_least": ">=",
    "equals": "==",
    "not_equals": "!=",
    "in": "in",
}


class ExpectationSyntaxError(ValueError):
    """An expectation that does not parse; `field` is the offending key path."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class NotEvaluable(Exception):
    """A value the expectation needs is missing or None."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass(frozen=True)
class Calibrated:
    """A threshold of `times` × a value of this machine's calibration, else `fallback`."""

    name: str
    times: float
    fallback: float

    def __str__(self) -> str:
        times = "" if self.times == 1 else f"{self.times:g} × "
        return f"{times}calibrated {self.name} (else {self.fallback:g})"

    def resolve(self, lookup: CalibrationLookup | None) -> tuple[float, str]:
        """(threshold, where it comes from)."""
        if lookup is None:
            return self.fallback, NO_CALIBRATION
        value, source = lookup(self.name)
        if value is None:
            return self.fallback, f"fixed threshold: {source}"
        threshold = self.times * value
        times = "" if self.times == 1 else f"{self.times:g} × "
        return threshold, f"{times}{self.name} {value:.3g}, {source}"


@dataclass(frozen=True)
class Condition:
    name: str
    op: str
    operand: Any

    def holds(self, values: dict[str, Any]) -> bool:
        if values.get(self.name) is None:
            raise NotEvaluable(self.name)
        value = values[self.name]
        if isinstance(self.operand, Calibrated):  # not resolved (a caller outside a walk): the fixed threshold
            return replace(self, operand=self.operand.fallback).holds(values)
        if self.op == "below":
            return bool(value < self.operand)
        if self.op == "above":
            return bool(value > self.operand)
        if self.op == "at_most":
            return bool(value <= self.operand)
        if self.op == "at_least":
            return bool(value >= self.operand)
        if self.op == "equals":
            return bool(value == self.operand)
        if self.op == "not_equals":
            return bool(value != self.operand)
        return value in self.operand  # "in"

    def names(self) -> list[str]:
        return [self.name]

    def resolve(self, lookup: CalibrationLookup | None) -> tuple[Condition, list[str]]:
        if not isinstance(self.operand, Calibrated):
            return self, []
        threshold, source = self.operand.resolve(lookup)
        threshold = float(f"{threshold:.4g}")  # 9.2, not 9.200000000000001
        resolved = replace(self, operand=int(threshold) if threshold.is_integer() else threshold)
        return resolved, [f"{resolved.describe()}: {source}"]

    def describe(self) -> str:
        operand = self.operand
        if isinstance(operand, bool):
            operand = str(operand).lower()
        return f"{self.name} {OPERATORS[self.op]} {operand}"


@dataclass(frozen=True)
class Expectation:
    """`all` of the parts (mode "all") or `any` of them (mode "any")."""

    mode: str
    parts: tuple[Condition | Expectation, ...]

    def holds(self, values: dict[str, Any]) -> bool:
        if self.mode == "all":
            return all(part.holds(values) for part in self.parts)
        # `any`: a part that cannot be evaluated does not make the whole unevaluable
        # as long as another part holds.
        missing: NotEvaluable | None = None
        for part in self.parts:
            try:
                if part.holds(values):
                    return True
            except NotEvaluable as err:
                missing = err
        if missing is not None:
            raise missing
        return False

    def straddles(self, values: dict[str, Any], margins: dict[str, float]) -> list[str]:
        """The values whose reading, moved by its margin (its uncertainty) either way, would turn
        this expectation's outcome: a reading too close to its threshold to judge."""
        held = self.holds(values)
        close = []
        for name in self.names():
            value, margin = values.get(name), margins.get(name)
            if not margin or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            for moved in (value - margin, value + margin):
                try:
                    if self.holds({**values, name: moved}) != held:
                        close.append(name)
                        break
                except NotEvaluable:
                    continue
        return close

    def names(self) -> list[str]:
        out: list[str] = []
        for part in self.parts:
            out.extend(n for n in part.names() if n not in out)
        return out

    def calibrated(self) -> bool:
        """Whether any threshold refers to the calibration."""
        return any(p.calibrated() if isinstance(p, Expectation) else isinstance(p.operand, Calibrated)
                   for p in self.parts)

    def resolve(self, lookup: CalibrationLookup | None) -> tuple[Expectation, list[str]]:
        """This expectation with calibrated thresholds made numbers, and a note per threshold
        saying where its number came from (the calibration, or the fixed fallback and why)."""
        if not self.calibrated():
            return self, []
        parts: list[Condition | Expectation] = []
        notes: list[str] = []
        for part in self.parts:
            resolved, more = part.resolve(lookup)
            parts.append(resolved)
            notes.extend(more)
        return Expectation(mode=self.mode, parts=tuple(parts)), notes

    def describe(self) -> str:
        texts = [p.describe() if isinstance(p, Condition) or len(p.parts) == 1 else f"({p.describe()})"
                 for p in self.parts]
        return (" and " if self.mode == "all" else " or ").join(texts)


def parse_expectation(data: Any, field: str = "expect") -> Expectation:
    if not isinstance(data, dict) or not data:
        raise ExpectationSyntaxError(field, "must be a mapping of value names to conditions")
    parts: list[Condition | Expectation] = []
    for key, spec in data.items():
        where = f"{field}.{key}"
        if key in ("all", "any"):
            if not isinstance(spec, list) or not spec:
                raise ExpectationSyntaxError(where, f"`{key}` needs a non-empty list of expectations")
            sub = [parse_expectation(item, f"{where}[{i}]") for i, item in enumerate(spec)]
            parts.append(Expectation(mode=key, parts=tuple(sub)))
            continue
        if not isinstance(key, str) or not key.replace("_", "").isalnum():
            raise ExpectationSyntaxError(where, "a value name must be a plain identifier")
        if not isinstance(spec, dict) or not spec:
            raise ExpectationSyntaxError(where, f"needs a condition such as {{below: 0.1}}; one of {', '.join(OPERATORS)}")
        for op, operand in spec.items():
            if op not in OPERATORS:
                raise ExpectationSyntaxError(f"{where}.{op}", f"unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
            if op in ("below", "above", "at_most", "at_least") and isinstance(operand, dict):
                operand = _parse_calibrated(operand, f"{where}.{op}")
            elif op in ("below", "above", "at_most", "at_least") and (
                isinstance(operand, bool) or not isinstance(operand, (int, float))
            ):
                raise ExpectationSyntaxError(f"{where}.{op}", f"`{op}` needs a number, got {operand!r}")
            if op == "in" and not isinstance(operand, list):
                raise ExpectationSyntaxError(f"{where}.{op}", "`in` needs a list")
            parts.append(Condition(name=key, op=op, operand=operand))
    return Expectation(mode="all", parts=tuple(parts))


def _number(data: dict[str, Any], key: str, where: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpectationSyntaxError(f"{where}.{key}", f"`{key}` needs a number, got {value!r}")
    return float(value)


def _parse_calibrated(data: dict[str, Any], where: str) -> Calibrated:
    """`{calibrated: NAME, times: X, fallback: Y}`: NAME one of the calibration's values."""
    from fieldguide.calibrate.results import VALUES

    unknown = [k for k in data if k not in ("calibrated", "times", "fallback")]
    if unknown:
        raise ExpectationSyntaxError(f"{where}.{unknown[0]}", "a calibrated threshold takes calibrated, times "
                                     "and fallback")
    if "calibrated" not in data or "fallback" not in data:
        raise ExpectationSyntaxError(where, "a calibrated threshold needs {calibrated: NAME, fallback: NUMBER} "
                                     "(and optionally times: NUMBER)")
    name = data["calibrated"]
    if not isinstance(name, str) or name not in VALUES:
        raise ExpectationSyntaxError(f"{where}.calibrated", f"no calibrated value {name!r}; calibrate measures: "
                                     f"{', '.join(VALUES)}")
    times = _number(data, "times", where) if "times" in data else 1.0
    return Calibrated(name=str(name), times=times, fallback=_number(data, "fallback", where))
