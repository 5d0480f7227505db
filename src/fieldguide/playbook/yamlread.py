"""YAML reading that remembers the line of every mapping and key, for error messages."""

from __future__ import annotations

from typing import Any

import yaml


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


def read_yaml(text: str) -> Any:
    """Parse YAML text; raises yaml.YAMLError (with a problem_mark) on bad input."""
    return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
