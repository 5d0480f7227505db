"""The base of probes that measure through the in-process agent: one capability each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from fieldguide.probes.base import NEEDS_AGENT, NEEDS_PROCESS, Probe, ProbeContext

if TYPE_CHECKING:
    from fieldguide.agent.channel import AgentConnection, AgentReply


class AgentProbe(Probe):
    """Asks one agent capability (`capability`), and says when a hook of it failed to install."""

    capability: ClassVar[str]
    needs = frozenset({NEEDS_PROCESS, NEEDS_AGENT})

    def connection(self, ctx: ProbeContext) -> AgentConnection | None:
        agent = ctx.target.agent
        return agent.primary() if agent is not None else None

    def lacks_capability(self, conn: AgentConnection) -> str | None:
        if conn.capabilities and self.capability not in conn.capabilities:
            return (f"this agent cannot do {self.capability} "
                    f"(it can: {', '.join(sorted(conn.capabilities))})")
        return None

    def ask(self, ctx: ProbeContext, params: dict[str, Any] | None = None, timeout: float = 10.0,
            name: str | None = None) -> AgentReply:
        from fieldguide.agent.channel import AgentReply

        agent = ctx.target.agent
        if agent is None:
            return AgentReply(False, error="the in-process agent is not connected")
        return agent.request(self.capability, params, timeout=timeout, name=name)

    def hook_failures(self, ctx: ProbeContext, conn: AgentConnection | None) -> list[str]:
        """Hooks of this capability that did not install, each streamed as a reading."""
        failures = conn.failures_of(self.capability) if conn is not None else []
        for failure in failures:
            self.reading(ctx, status=f"agent hook did not install: {failure}")
        return failures
