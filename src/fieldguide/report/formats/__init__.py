"""Report formats by name: each is one module here with `NAME`, `SUFFIXES` and `render(findings)`.
A new format is its module and a line in FORMAT_MODULES."""

from __future__ import annotations

import importlib
from types import ModuleType

FORMAT_MODULES = {"json": "json_report", "md": "markdown", "html": "html"}
FORMATS = tuple(FORMAT_MODULES)


def format_module(name: str) -> ModuleType:
    """The module that renders format `name`; ValueError for a format there is none of."""
    if name not in FORMAT_MODULES:
        raise ValueError(f"unknown report format {name!r}; use one of {', '.join(FORMATS)}")
    return importlib.import_module(f"{__name__}.{FORMAT_MODULES[name]}")


def suffixes() -> dict[str, str]:
    """Report formats by file suffix (`.md` -> md)."""
    return {suffix: name for name in FORMATS for suffix in format_module(name).SUFFIXES}
