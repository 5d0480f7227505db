"""Whose line made a call: the job's, as opposed to torch's or this agent's own (standard library
only, imported by capabilities that wrap the job's calls)."""

from __future__ import annotations

import sys


def is_agent(filename: str) -> bool:
    """A file of this agent: loaded as `_fieldguide_agent`, or from the installed package."""
    return "_fieldguide_agent" in filename or "fieldguide/agent" in filename


def is_agent_or_torch(filename: str) -> bool:
    return "/torch/" in filename or is_agent(filename)


def caller_line(depth: int = 2) -> str | None:
    """The first frame outside torch and this agent, from `depth` frames up (2: the caller of the
    function that calls this): the job's line that made the call, as path:line."""
    frame = sys._getframe(depth)
    while frame is not None:
        name = frame.f_code.co_filename
        if not is_agent_or_torch(name):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None
