"""The playbook data model: plain frozen dataclasses, built by the loader."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fieldguide.playbook.expect import Expectation


@dataclass(frozen=True)
class Edge:
    """Where a node leads: another node, a departure cause, or a healthy leaf."""

    kind: str  # "node" | "cause" | "leaf" | "stop" (error and depart edges: end inconclusive, target says why)
    target: str
    summary: str | None = None  # overrides the cause's summary template

    def describe(self) -> str:
        return self.target if self.kind == "node" else f"{self.kind} {self.target}"


@dataclass(frozen=True)
class MeasureOption:
    """One way to decide a node: a probe with parameters and an expectation."""

    probe: str
    params: dict[str, Any]
    expect: Expectation


@dataclass(frozen=True)
class Node:
    id: str
    question: str
    why: str
    measure: tuple[MeasureOption, ...]
    on_pass: Edge
    on_depart: Edge
    on_error: Edge | None = None
    line: int = 0
    # The node measures one share of the step (`share`: the value that holds it, `share_at`: the
    # value naming where it is spent). Its departure does not end the walk: the walk names the
    # cause, goes on along the node's pass edge, and the largest departing share is named first.
    share: str | None = None
    share_at: str | None = None


@dataclass(frozen=True)
class Cause:
    """A cause's field-guide page, in fixed sections (like a lint rule's docs)."""

    id: str
    title: str
    summary: str  # a template over measured values: "{data_wait_fraction:.0%} of ..."
    why: str
    fix: tuple[str, ...]
    verify: str
    # How fieldguide can try the fix on a launched job (`diagnose --try-fix`); see loader._experiment.
    experiment: dict[str, Any] | None = None


@dataclass(frozen=True)
class Playbook:
    id: str
    title: str
    purpose: str
    start: str
    nodes: dict[str, Node]
    causes: dict[str, Cause]
    leaves: dict[str, str] = field(default_factory=dict)  # leaf id -> what it means
    # Measurements whose windows start with the walk, alongside the first nodes' (a stack window
    # that a later node needs need not wait for the nodes before it).
    prefetch: tuple[MeasureOption, ...] = ()
    # Agent capabilities that measure from a launched job's start (an OOM in the first step
    # must find saved tensors already counted).
    arm: tuple[str, ...] = ()
    # Seconds of measurement when --budget is not given, and the longest wait for a launched job's
    # first steps (a cold torch.compile takes tens of seconds before the first one).
    budget: float | None = None
    ready_timeout: float | None = None
    # Launch the job with TORCH_TRACE (torch's structured compile log, for tlparse) beside the report.
    torch_trace: bool = False
    # Walks with no process (`diagnose --local`): every node measures the machine.
    local: bool = False
    # Where lists of playbooks put it: the most used first (slow-training), then by id.
    order: int = 100
    source: Path | None = None


class _SafeFormatter(string.Formatter):
    """Formats `{name}` / `{name:spec}` only: no attribute or index access."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        return kwargs.get(field_name, "n/a"), field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None or isinstance(value, str) and format_spec:
            return "n/a" if value is None else value
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):
            return str(value)


# A format spec's width and precision: at most three digits each (`{x:>9999999999}` once built a
# 10 GB string from a colleague's causes.yaml).
_SPEC_NUMBER = re.compile(r"\d{4,}")
# Playbook, node and cause ids: they reach completion scripts and file names.
ID_PATTERN = re.compile(r"[A-Za-z0-9._-]+")


def check_id(value: str) -> bool:
    """An id of the form playbooks and causes use: letters, digits, '.', '_' and '-', one line."""
    return bool(ID_PATTERN.fullmatch(value)) and len(value) <= 200


def template_fields(template: str) -> list[str]:
    """The names a template uses; raises ValueError if it uses anything but plain names, or a
    width or precision over three digits."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(template):
        if name is None:
            continue
        if not name.isidentifier() or conversion:
            raise ValueError(f"template field {{{name}}} must be a plain value name")
        if spec and "{" in spec:
            raise ValueError("nested template fields are not allowed")
        if spec and _SPEC_NUMBER.search(spec):
            raise ValueError(f"template field {{{name}:{spec}}}: a width or precision of at most 3 digits")
        names.append(name)
    return names


def render_template(template: str, values: dict[str, Any]) -> str:
    return _SafeFormatter().vformat(template, (), values)
