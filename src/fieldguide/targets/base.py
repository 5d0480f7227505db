"""What every target answers, and the machine alone."""

from __future__ import annotations

import functools
from typing import Any

from fieldguide.agent.channel import AgentServer


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    """Whether NVML sees a GPU on this machine (asked once: it does not change under a walk)."""
    from fieldguide.host.nvml import NvmlUnavailable, nvml_devices

    try:
        return bool(nvml_devices())
    except NvmlUnavailable:
        return False


class Target:
    kind = "local"
    agent: AgentServer | None = None

    @property
    def pid(self) -> int | None:
        return None

    def alive(self) -> bool:
        return True

    def capabilities(self) -> set[str]:
        return {"gpu"} if gpu_present() else set()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "pid": self.pid, "cmdline": []}

    def log_tail(self, lines: int = 40) -> list[str]:
        return []

    def gone_reason(self) -> str:
        return "the target exited"

    def ending(self) -> dict[str, Any] | None:
        """How the target ended on its own during the walk (the report's `exit`), or None."""
        return None

    def close(self) -> None:
        """End what fieldguide started; never touches a process it attached to."""


class LocalTarget(Target):
    """The machine alone: GPU and host probes, no process."""
