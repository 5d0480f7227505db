"""Where calibrations live: one JSON file per host, torch version and device, under
$XDG_CACHE_HOME/fieldguide (~/.cache/fieldguide when it is unset).

Reading needs no torch: a walk finds this machine's calibration by host name alone, preferring
the one made with the torch that this Python has, else the newest.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable
from pathlib import Path

from fieldguide.calibrate.results import Calibration
from fieldguide.safewrite import write_text

PREFIX = "calibration-"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec: a relative path is invalid and is ignored.
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "fieldguide"


def host() -> str:
    return socket.gethostname() or "localhost"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+_]+", "-", text).strip("-").lower() or "unknown"


def key(host_name: str, torch_version: str, device: str) -> str:
    """The file name for one host, torch version and device."""
    return f"{PREFIX}{_slug(host_name)}--torch-{_slug(torch_version)}--{_slug(device)}.json"


def path_for(host_name: str, torch_version: str, device: str) -> Path:
    return cache_dir() / key(host_name, torch_version, device)


def read(path: Path) -> Calibration:
    """One cached calibration; ValueError (with the reason) when it cannot be used."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a calibration")
    try:
        return Calibration.from_json(data)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{path} is not a calibration this fieldguide reads ({err})") from None


def write(calibration: Calibration) -> Path:
    path = path_for(calibration.host, calibration.torch, calibration.device)
    return write_text(path, json.dumps(calibration.to_json(), indent=2) + "\n")  # never half a file


def cached_for_host(host_name: str | None = None) -> list[Calibration]:
    """Every readable calibration of this host, newest first (unreadable files are passed over)."""
    name = host_name or host()
    prefix = f"{PREFIX}{_slug(name)}--"
    found = []
    try:
        paths = sorted(cache_dir().glob(f"{prefix}*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            calibration = read(path)
        except ValueError:
            continue
        if calibration.host == name:
            found.append(calibration)
    return sorted(found, key=lambda c: c.created, reverse=True)


def _installed_torch() -> str | None:
    """This Python's torch version, from its metadata (torch is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def for_this_machine() -> Calibration | None:
    """The calibration a walk on this machine uses, or None when there is none."""
    found = cached_for_host()
    if not found:
        return None
    torch_version = _installed_torch()
    same_torch = [c for c in found if torch_version and c.torch == torch_version]
    return (same_torch or found)[0]


def lookup_for_this_machine() -> Callable[[str], tuple[float | None, str]] | None:
    """What a walk's calibrated thresholds read (`Walk(calibration=...)`), or None."""
    found = for_this_machine()
    return found.lookup if found is not None else None
