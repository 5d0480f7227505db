"""A stack window as a speedscope profile (https://www.speedscope.app/file-format-schema.json):
py-spy's raw (collapsed) lines, one sampled profile per process and thread, so that a user can
open what fieldguide sampled in speedscope.app and look for themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fieldguide.probes.evidence import Artifact
from fieldguide.probes.pyspy_raw import PROCESS, THREAD

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
OPEN_WITH = "https://www.speedscope.app (drop the file on it), or `speedscope FILE` (npm install -g speedscope)"


def speedscope_profile(raw: str, name: str) -> dict[str, Any]:
    """py-spy `record --format raw --threads [--subprocesses]` text as a speedscope file."""
    frames: list[dict[str, str]] = []
    index: dict[str, int] = {}
    profiles: dict[str, dict[str, Any]] = {}
    for line in raw.splitlines():
        body, _, count_text = line.rstrip().rpartition(" ")
        if not body or not count_text.isdigit():
            continue
        pids = []
        while (m := PROCESS.match(body)) is not None:
            end = body.find('";', m.end())
            if end < 0:
                break
            pids.append(m.group(1))
            body = body[end + 2:]
        head, sep, rest = body.partition(";")
        thread = THREAD.match(head)
        if thread is not None:
            who, body = (thread.group(2) or thread.group(1)), (rest if sep else "")
        else:
            who = "all threads"
        key = (f"pid {pids[-1]} " if pids else "") + who
        stack = []
        for frame in body.split(";") if body else []:
            if frame not in index:
                index[frame] = len(frames)
                frames.append({"name": frame})
            stack.append(index[frame])
        profile = profiles.setdefault(key, {"type": "sampled", "name": key, "unit": "none", "startValue": 0,
                                            "endValue": 0, "samples": [], "weights": []})
        profile["samples"].append(stack)
        profile["weights"].append(int(count_text))
        profile["endValue"] += int(count_text)
    ordered = sorted(profiles.values(), key=lambda p: -p["endValue"])  # the busiest thread opens first
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": ordered, "name": name,
            "activeProfileIndex": 0, "exporter": "fieldguide"}


def keep_speedscope(folder: Path, raw: str, name: str, stem: str) -> Artifact | None:
    """Write the profile into the walk's artifacts folder; None when the window has no samples."""
    profile = speedscope_profile(raw, name)
    if not profile["profiles"]:
        return None
    path = folder / f"{stem}.speedscope.json"
    path.write_text(json.dumps(profile))
    return {"kind": "speedscope", "path": str(path), "open_with": OPEN_WITH}
