"""Declarative expectations over a Measurement's named values.

A playbook writes `data_wait_fraction: {below: 0.1}`; several keys must all
hold; `all:` and `any:` combine lists. There is no eval and no shell: a
playbook from a colleague is safe to open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
class Condition:
    name: str
    op: str
    operand: Any

    def holds(self, values: dict[str, Any]) -> bool:
        if values.get(self.name) is None:
            raise NotEvaluable(self.name)
        value = values[self.name]
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

    def names(self) -> list[str]:
        out: list[str] = []
        for part in self.parts:
            out.extend(n for n in part.names() if n not in out)
        return out

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
            if op in ("below", "above", "at_most", "at_least") and (
                isinstance(operand, bool) or not isinstance(operand, (int, float))
            ):
                raise ExpectationSyntaxError(f"{where}.{op}", f"`{op}` needs a number, got {operand!r}")
            if op == "in" and not isinstance(operand, list):
                raise ExpectationSyntaxError(f"{where}.{op}", "`in` needs a list")
            parts.append(Condition(name=key, op=op, operand=operand))
    return Expectation(mode="all", parts=tuple(parts))
