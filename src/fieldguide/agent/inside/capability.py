"""The shape of a capability: hooks it installs, requests it answers, what it streams."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .core import Agent


class Capability:
    """One thing the agent can do inside the job.

    Subclasses set `name`, `requests` (request names answered by `on_request`) and
    `streams` (stream names created with `agent.stream`), and override the hooks
    they need. Hooks on the training thread (`on_step`, torch hooks) must be cheap.
    """

    name: ClassVar[str]
    requests: ClassVar[tuple[str, ...]] = ()
    streams: ClassVar[tuple[str, ...]] = ()

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def start(self) -> None:
        """At agent start, before the job's script runs (standard library only)."""

    def hook_torch(self, torch: ModuleType) -> None:
        """Once the job has imported torch."""

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        """Answer now or later with agent.reply / agent.fail; raising is a failed reply."""
        self.agent.fail(request_id, f"{self.name} answers no request {name!r}")

    def on_step(self) -> None:
        """At a step boundary, on the training thread, while registered as a step listener."""

    def tick(self) -> None:
        """On the agent thread before each flush (deadlines, fallbacks)."""

    def arm(self, options: frozenset[str]) -> None:
        """Measure from the job's start (fieldguide asked at launch: FIELDGUIDE_AGENT_ARM=name[:option...])."""

    def on_exception(self, exc: BaseException) -> None:
        """An uncaught exception is ending the job; its frames are still alive (before on_exit)."""

    def on_exit(self) -> None:
        """The job is ending (uncaught exception or interpreter exit): leave what you have."""


def expire_request(capability: Any, what: str, window_open: Callable[[], bool]) -> None:
    """A step-window request (`capability.request`, with its `deadline`) that fieldguide stopped
    waiting for: failed with "no training step came to `what`", and the step listener dropped
    unless a window is open (`window_open()`). Called from the agent thread's tick."""
    with capability.lock:
        request = capability.request
        if request is None or time.monotonic() <= request["deadline"]:
            return
        capability.request = None  # fieldguide stopped waiting
    capability.agent.fail(request["id"], f"no training step came to {what}")
    if not window_open():
        capability.agent.remove_step_listener(capability)
