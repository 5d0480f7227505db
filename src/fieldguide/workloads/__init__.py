"""The workload zoo: small, self-contained CPU training scripts for exercising
`fieldguide`.

Each script trains a tiny model for ``FIELDGUIDE_WORKLOAD_SECONDS`` seconds
(default 120), prints ``step N loss X`` progress lines, and has exactly one
known performance problem, or none. Each declares what a diagnosis must find in
a module-level literal::

    FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

``cause`` is the cause id the walk must name (None for a healthy workload, which
then names the healthy leaf as ``conclusion``); ``modes`` are the ways it must be
diagnosed: ``launch`` (with the agent) and/or ``attach`` (py-spy and psutil only).
``verdict`` is the walk's verdict: ``departure`` (a cause), ``clean`` (a healthy
leaf) or ``inconclusive`` (no cause and no leaf: e.g. a process that does not
train). It may be left out for the first two, where cause/conclusion imply it::

    FIELDGUIDE = {"playbook": "slow-training", "cause": None, "verdict": "inconclusive", "modes": ["launch"]}

``python_args`` (optional) are the interpreter's arguments before the script, for a workload
that runs under a launcher: a multi-rank job under torchrun declares
``"python_args": ["-m", "torch.distributed.run", "--nproc-per-node", "2"]`` and is run as
``python -m torch.distributed.run --nproc-per-node 2 <path(name)>`` (see ``command``).

The declaration is read with ``ast.literal_eval`` from the source, never by
importing the script: the scripts import torch, and fieldguide's process must not.
The scripts import only the standard library and torch, so they can be run with
``python <path(name)>`` anywhere torch is installed.
"""

from __future__ import annotations

import ast
import importlib.resources
import pathlib
from dataclasses import dataclass
from typing import Any

MODES = ("launch", "attach")
VERDICTS = ("departure", "clean", "inconclusive")
DEMO = "loader_remote_reads"


@dataclass(frozen=True)
class Declaration:
    """What a diagnosis of one workload must find."""

    name: str
    playbook: str
    cause: str | None
    modes: tuple[str, ...]
    conclusion: str | None = None
    verdict: str = "departure"  # departure (cause), clean (conclusion) or inconclusive (neither)
    python_args: tuple[str, ...] = ()  # the interpreter's arguments before the script (a launcher: torchrun)


class BadDeclaration(ValueError):
    """A workload's FIELDGUIDE literal is missing or malformed; the message names the file."""


def _scripts() -> dict[str, pathlib.Path]:
    folder = importlib.resources.files(__package__)
    return {pathlib.Path(str(entry)).stem: pathlib.Path(str(entry)) for entry in folder.iterdir()
            if entry.name.endswith(".py") and not entry.name.startswith("_")}


def read_declaration(source: str, name: str = "<workload>") -> Declaration:
    """The FIELDGUIDE literal of a workload's source, without running any of it."""
    tree = ast.parse(source, filename=name)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FIELDGUIDE"
                                                for t in node.targets):
            try:
                data: Any = ast.literal_eval(node.value)
            except ValueError:
                raise BadDeclaration(f"{name}: FIELDGUIDE must be a literal dict") from None
            return _validate(data, name)
    raise BadDeclaration(f"{name}: no FIELDGUIDE declaration")


def _validate(data: Any, name: str) -> Declaration:
    if not isinstance(data, dict):
        raise BadDeclaration(f"{name}: FIELDGUIDE must be a dict")
    unknown = set(data) - {"playbook", "cause", "modes", "conclusion", "verdict", "python_args"}
    if unknown:
        raise BadDeclaration(f"{name}: unknown FIELDGUIDE keys {sorted(unknown)}")
    playbook, cause, modes = data.get("playbook"), data.get("cause"), data.get("modes")
    conclusion, verdict = data.get("conclusion"), data.get("verdict")
    if not isinstance(playbook, str) or not playbook:
        raise BadDeclaration(f"{name}: FIELDGUIDE playbook must be a playbook id")
    if cause is not None and (not isinstance(cause, str) or "." not in cause):
        raise BadDeclaration(f"{name}: FIELDGUIDE cause must be a cause id (area.name) or None")
    if verdict is not None and verdict not in VERDICTS:
        raise BadDeclaration(f"{name}: FIELDGUIDE verdict must be one of {', '.join(VERDICTS)}")
    if verdict == "inconclusive":
        if cause is not None or conclusion is not None:
            raise BadDeclaration(f"{name}: FIELDGUIDE verdict inconclusive takes cause None and no conclusion")
    elif (cause is None) == (conclusion is None) or (conclusion is not None and not isinstance(conclusion, str)):
        raise BadDeclaration(f"{name}: FIELDGUIDE needs a cause, or (healthy) cause None and a conclusion")
    implied = "departure" if cause is not None else "clean" if conclusion is not None else "inconclusive"
    if verdict is not None and verdict != implied:
        raise BadDeclaration(f"{name}: FIELDGUIDE verdict {verdict} contradicts its cause/conclusion ({implied})")
    if not isinstance(modes, list) or not modes or not set(modes) <= set(MODES) or len(set(modes)) != len(modes):
        raise BadDeclaration(f"{name}: FIELDGUIDE modes must be a non-empty list of {', '.join(MODES)}")
    python_args = data.get("python_args", [])
    if not isinstance(python_args, list) or not all(isinstance(a, str) and a for a in python_args):
        raise BadDeclaration(f"{name}: FIELDGUIDE python_args must be a list of non-empty strings")
    return Declaration(name=pathlib.Path(name).stem, playbook=playbook, cause=cause, modes=tuple(modes),
                       conclusion=conclusion, verdict=implied, python_args=tuple(python_args))


def declarations() -> dict[str, Declaration]:
    """Every bundled workload's declaration, by name (the script's stem)."""
    return {name: read_declaration(script.read_text(encoding="utf-8"), str(script))
            for name, script in sorted(_scripts().items())}


def path(name: str) -> pathlib.Path:
    """Filesystem path of the workload script called ``name`` (its stem). Found by listing the
    folder, not by reading every declaration (~40 ms of parsing before the demo's first frame)."""
    scripts = _scripts()
    if name not in scripts:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(sorted(scripts))}")
    resource = importlib.resources.files(__package__).joinpath(f"{name}.py")
    return pathlib.Path(str(resource))


def command(name: str, python: str) -> list[str]:
    """The command line that runs workload ``name`` with interpreter ``python``: its declared
    ``python_args`` (a launcher such as torchrun) before the script."""
    return [python, *declarations()[name].python_args, str(path(name))]
