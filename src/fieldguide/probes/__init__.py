"""The probe registry, keyed by stable ids.

Built-in probes register exactly as a third-party one would: a module in this
package (or an entry point in the `fieldguide.probes` group) whose classes use
`@register`. Probe modules import nothing heavy at import time.
"""

from __future__ import annotations

import importlib
from typing import TypeVar

from fieldguide.probes.base import Probe


def builtin_modules() -> list[str]:
    """Every module of this package: a new probe module is found by being here, no list to edit."""
    import pkgutil

    return [f"{__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)]

P = TypeVar("P", bound=type[Probe])


class Registry:
    def __init__(self) -> None:
        self._probes: dict[str, type[Probe]] = {}
        self._loaded = False
        self._plugins_loaded = False

    def register(self, cls: P) -> P:
        if cls.id in self._probes and self._probes[cls.id] is not cls:
            raise ValueError(f"probe id {cls.id!r} registered twice")
        self._probes[cls.id] = cls
        return cls

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for name in builtin_modules():
            importlib.import_module(name)

    def _load_plugins(self) -> None:
        """Other packages' probes (entry points `fieldguide.probes`), read when an id is not a
        bundled one: scanning every installed distribution's metadata costs ~30 ms, and the
        bundled playbooks never need it."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points  # ~15 ms of email and zipfile, here only

        for ep in entry_points(group="fieldguide.probes"):
            ep.load()

    def get(self, probe_id: str) -> type[Probe] | None:
        self._load()
        if probe_id not in self._probes:
            self._load_plugins()
        return self._probes.get(probe_id)

    def ids(self) -> list[str]:
        self._load()
        self._load_plugins()
        return sorted(self._probes)


registry = Registry()
register = registry.register
