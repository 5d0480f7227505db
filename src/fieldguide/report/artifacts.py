"""The files a walk leaves for the viewers people already open (report field `artifacts`):
gathered from the nodes' evidence, copied beside the report when one is written, and listed in
every report format with what opens them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fieldguide.probes import evidence as ev
from fieldguide.probes.evidence import Artifact

TLPARSE = "tlparse (pip install tlparse): an HTML report of every compile, graph break and recompile"


def gather(evidences: Iterable[Mapping[str, Any]]) -> list[Artifact]:
    """Every artifact these measurements' evidence names, once each, and the TORCH_TRACE logs
    with the tlparse command that reads each (tlparse takes one log file, not the folder)."""
    found: dict[str, Artifact] = {}
    for node in evidences:
        for artifact in ev.ARTIFACTS.of(node) or []:
            if isinstance(artifact, dict) and isinstance(artifact.get("path"), str):
                found.setdefault(artifact["path"], artifact)
        folder = ev.TORCH_TRACE.of(node)
        if isinstance(folder, str) and os.path.isdir(folder):
            for log in sorted(Path(folder).glob("*.log")):
                found.setdefault(str(log), {"kind": "torch_trace", "path": str(log), "open_with": TLPARSE,
                                            "command": tlparse_command(log)})
    return list(found.values())


def tlparse_command(log: Path) -> str:
    return f"tlparse {log} -o {log.parent}/{log.stem}-tlparse --overwrite"


def place(findings: Any, report: Path) -> Any:
    """The findings with each artifact that is not already beside the report copied into
    `<report stem>-artifacts/` next to it (a private folder: stacks and traces show the job's
    code), its path the copy's. Artifacts already beside the report (TORCH_TRACE's folder) stay."""
    artifacts: list[Artifact] = list(findings.artifacts)
    if not artifacts:
        return findings
    from fieldguide.safewrite import copy_file, private_directory

    home = report.resolve().parent
    wanted = home / f"{report.stem}-artifacts"
    folder: Path | None = None
    placed: list[Artifact] = []
    for artifact in artifacts:
        source = Path(artifact["path"])
        if home in source.resolve().parents or not source.is_file():
            # beside the report already (placed before, or TORCH_TRACE's folder)
            placed.append(_with_href(artifact, source, home))
            continue
        if folder is None:  # this user's own private folder: never a link or a folder planted there
            folder = private_directory(wanted)
        copy = copy_file(source, folder / source.name)
        placed.append(_with_href({**artifact, "path": str(copy)}, copy, home))
    return dataclasses.replace(findings, artifacts=placed)


def _with_href(artifact: Artifact, path: Path, home: Path) -> Artifact:
    """The artifact with its link relative to the report's folder, where it lies under it: the
    report and its -artifacts/ folder copied off the node together keep every link."""
    try:
        relative = path.resolve().relative_to(home)
    except ValueError:
        return artifact
    return {**artifact, "href": relative.as_posix()}
