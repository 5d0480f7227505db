"""What runs inside a launched job: the agent core and its capabilities.

Loaded by file path as the package `_fieldguide_agent` from a generated
`sitecustomize.py` (see ../bootstrap.py), so the job's interpreter needs neither
fieldguide nor its dependencies: everything here is standard library, and torch
only once the job itself imports it. Each capability is one module in
`capabilities/` (found by listing that folder): adding one is adding a file.
The job runs the same with or without the agent: every hook swallows its own errors.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Agent

# The core is imported by install(), not here: fieldguide's own screens read rows.py from this
# package, and the core with its capabilities is ~10 ms of a first frame they do not need.
_agent: Agent | None = None


def _disable_in_child() -> None:
    # A forked child (a DataLoader worker) shares our socket: it must never write to it.
    if _agent is not None:
        _agent.disabled = True
    tracer = os.environ.get("FIELDGUIDE_TRACER_PID")
    if tracer and tracer.isdigit():
        from .core import allow_ptrace_by

        allow_ptrace_by(int(tracer))  # Yama exceptions are not inherited across fork


def install() -> None:
    global _agent
    path = os.environ.get("FIELDGUIDE_AGENT_SOCKET")
    if not path or _agent is not None:
        return
    from .core import Agent, allow_ptrace_by

    try:
        _agent = Agent.connect(path)
    except OSError:
        return  # fieldguide is gone; run the job untouched
    tracer = os.environ.get("FIELDGUIDE_TRACER_PID")
    if tracer and tracer.isdigit():
        allow_ptrace_by(int(tracer))
    os.register_at_fork(after_in_child=_disable_in_child)
    _agent.start()
    threading.Thread(target=_agent.serve, name="fieldguide-agent", daemon=True).start()
    if "torch" in sys.modules:
        _agent.hook_torch(sys.modules["torch"])
    else:
        from .torchwatch import TorchWatcher

        sys.meta_path.insert(0, TorchWatcher(_agent.hook_torch))


def current() -> Agent | None:
    return _agent
