"""A stack window as a speedscope profile (https://www.speedscope.app/file-format-schema.json):
py-spy's raw (collapsed) lines, one sampled profile per process and thread, so that a user can
open what fieldguide sampled in speedscope.app and look for themselves.

Frames carry their file and line, as py-spy's own speedscope output does; weights are seconds
(samples over the rate). fieldguide's own part is left out: the agent's threads, and the agent's
wrapper frames between the job's line and torch's (a backward reads job -> torch, as without it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fieldguide.agent.inside.callers import is_agent
from fieldguide.probes.evidence import Artifact
from fieldguide.probes.pyspy_raw import FRAME, PROCESS, THREAD

SCHEMA = "https://www.speedscope.app/file-format-schema.json"
OPEN_WITH = "https://www.speedscope.app (drop the file on it), or `speedscope FILE` (npm install -g speedscope)"
OWN_THREAD = "fieldguide"  # the agent's threads are named fieldguide-agent, fieldguide-...


def frame_record(text: str) -> dict[str, Any]:
    """"step (train.py:20)" -> {"name": "step", "file": "train.py", "line": 20}."""
    m = FRAME.match(text)
    if m is None:
        return {"name": text}
    found: dict[str, Any] = {"name": m.group(1), "file": m.group(2)}
    if m.group(3):
        found["line"] = int(m.group(3))
    return found


def is_own_frame(text: str) -> bool:
    m = FRAME.match(text)
    return m is not None and is_agent(m.group(2))


def speedscope_profile(raw: str, name: str, rate: float | None = None) -> dict[str, Any]:
    """py-spy `record --format raw --threads [--subprocesses]` text at `rate` samples a second as
    a speedscope file (weights in samples where the rate is not known)."""
    scale = 1.0 / rate if rate else 1.0
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
        if who.startswith(OWN_THREAD):
            continue
        key = (f"pid {pids[-1]} " if pids else "") + who
        stack = []
        for frame in body.split(";") if body else []:
            if is_own_frame(frame):
                continue
            if frame not in index:
                index[frame] = len(frames)
                frames.append(frame_record(frame))
            stack.append(index[frame])
        profile = profiles.setdefault(key, {"type": "sampled", "name": key, "unit": "seconds" if rate else "none",
                                            "startValue": 0, "endValue": 0, "samples": [], "weights": []})
        weight = int(count_text) * scale
        profile["samples"].append(stack)
        profile["weights"].append(weight)
        profile["endValue"] += weight
    ordered = sorted(profiles.values(), key=lambda p: -p["endValue"])  # the busiest thread opens first
    return {"$schema": SCHEMA, "shared": {"frames": frames}, "profiles": ordered, "name": name,
            "activeProfileIndex": 0, "exporter": "fieldguide"}


def keep_speedscope(folder: Path, raw: str, name: str, stem: str, rate: float | None = None) -> Artifact | None:
    """Write the profile into the walk's artifacts folder; None when the window has no samples."""
    profile = speedscope_profile(raw, name, rate)
    if not profile["profiles"]:
        return None
    path = folder / f"{stem}.speedscope.json"
    path.write_text(json.dumps(profile))
    return {"kind": "speedscope", "path": str(path), "open_with": OPEN_WITH}
