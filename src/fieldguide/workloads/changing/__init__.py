"""Workloads that change mid-run, for `fieldguide watch`: healthy until
``FIELDGUIDE_CHANGE_AFTER_S`` seconds into training (default 90), then one problem starts (or,
for the healthy one, only the job's own rhythm goes on). At the change each prints
``fieldguide-zoo: changed at step N`` and, when ``FIELDGUIDE_CHANGE_MARK`` names a file, writes
the change's wall-clock time (``time.time()``) there, for a test to measure the time to the event.

Each declares what the watch must record in a literal read with ``ast`` (never imported)::

    WATCH = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

``cause`` None: no departure event at all. ``python_args`` as for the zoo (a launcher).
"""

from __future__ import annotations

import ast
import importlib.resources
import pathlib
from dataclasses import dataclass


@dataclass(frozen=True)
class WatchDeclaration:
    name: str
    playbook: str | None
    cause: str | None
    modes: tuple[str, ...]
    python_args: tuple[str, ...] = ()


def path(name: str) -> pathlib.Path:
    return pathlib.Path(str(importlib.resources.files(__package__).joinpath(f"{name}.py")))


def watch_declarations() -> dict[str, WatchDeclaration]:
    """Every changing workload's WATCH literal, by name."""
    found = {}
    for entry in importlib.resources.files(__package__).iterdir():
        if not entry.name.endswith(".py") or entry.name.startswith("_"):
            continue
        tree = ast.parse(entry.read_text(encoding="utf-8"), filename=entry.name)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "WATCH" for t in node.targets):
                data = ast.literal_eval(node.value)
                name = entry.name[:-3]
                found[name] = WatchDeclaration(name=name, playbook=data.get("playbook"), cause=data.get("cause"),
                                               modes=tuple(data["modes"]), python_args=tuple(data.get("python_args", ())))
    return dict(sorted(found.items()))
