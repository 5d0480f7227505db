"""YAML reading that remembers the line of every mapping and key, for error messages.

A playbook may come from anyone, so reading one is bounded: no aliases (a few lines of
anchors referencing anchors expand to billions of items, and playbooks never need them) and
no nesting deeper than MAX_DEPTH (libyaml's composer recurses in C: a few hundred kB of `[`
crash the interpreter, not just the load).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

# The bundled playbooks nest 10 deep at most (an `any:` inside an `all:` inside an expectation).
MAX_DEPTH = 64


class LineDict(dict):  # type: ignore[type-arg]
    """A dict that knows the line it started on and the line of each key."""

    line: int = 0

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[Any, int] = {}

    def line_of(self, key: Any) -> int:
        return self.lines.get(key, self.line)


class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """SafeLoader (no Python object tags) whose mappings are LineDicts; libyaml's when PyYAML has
    it (a tenth of the time: every walk reads every playbook and the causes)."""


def _mark(mark: Any) -> yaml.Mark | None:
    """libyaml's events carry its own Mark type; MarkedYAMLError is typed for PyYAML's."""
    if mark is None or isinstance(mark, yaml.Mark):
        return mark
    return yaml.Mark(str(mark.name), mark.index, mark.line, mark.column, None, 0)


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    mapping = LineDict()
    mapping.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise yaml.MarkedYAMLError(problem="a key must be a plain value, not a list or mapping",
                                       problem_mark=key_node.start_mark)
        if key in mapping:
            raise yaml.MarkedYAMLError(
                problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = key_node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

# Longer numbers are refused: YAML 1.1's sexagesimal ints (1:2:3...) cost quadratic time to
# build, a megabyte of them a minute; no playbook threshold needs more than a few digits.
MAX_NUMBER_CHARS = 100
_SCALAR_TAGS = ("int", "float", "bool", "null", "timestamp", "binary")


def _guarded(construct: Callable[[Any, yaml.ScalarNode], Any], tag: str) -> Callable[..., Any]:
    """A scalar constructor whose failures on odd values (2020-13-45, !!bool maybe, a 5000-digit
    int) are YAML errors at the value's line, not ValueError or KeyError tracebacks."""

    def construct_checked(loader: Any, node: yaml.ScalarNode) -> Any:
        if tag in ("int", "float") and len(str(node.value)) > MAX_NUMBER_CHARS:
            raise yaml.MarkedYAMLError(problem=f"a number longer than {MAX_NUMBER_CHARS} characters",
                                       problem_mark=_mark(node.start_mark))
        try:
            return construct(loader, node)
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as err:
            raise yaml.MarkedYAMLError(problem=f"not a valid {tag}: {str(node.value)[:40]!r} ({err})",
                                       problem_mark=_mark(node.start_mark)) from None

    return construct_checked


for _tag in _SCALAR_TAGS:
    _full = f"tag:yaml.org,2002:{_tag}"
    _LineLoader.add_constructor(_full, _guarded(_LineLoader.yaml_constructors[_full], _tag))

_OPEN = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _check_bounds(text: str) -> None:
    """Refuse aliases and deep nesting from the event stream, which is flat (no recursion) and
    stops at the first offence, before anything is composed."""
    depth = 0
    for event in yaml.parse(text, Loader=_LineLoader):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=f"nested more than {MAX_DEPTH} levels deep",
                                           problem_mark=_mark(event.start_mark))
        elif isinstance(event, _CLOSE):
            depth -= 1
        elif isinstance(event, yaml.AliasEvent):
            raise yaml.MarkedYAMLError(problem=f"alias *{event.anchor} is not allowed in a playbook "
                                       "(write the value out)", problem_mark=_mark(event.start_mark))


def read_yaml(text: str) -> Any:
    """Parse YAML text; raises yaml.YAMLError (with a problem_mark) on bad input."""
    _check_bounds(text)
    return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
