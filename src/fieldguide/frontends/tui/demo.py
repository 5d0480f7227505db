"""The bundled demo as a target: its command, its label, and the playbook it comes with. The TUI
names no playbook: the demo's is the one the demo workload declares (its FIELDGUIDE literal,
fieldguide.workloads), unless the caller says which."""

from __future__ import annotations

from fieldguide.frontends.tui.model import TargetSpec


def demo_playbook() -> str:
    """The playbook the demo workload declares it is diagnosed with."""
    from fieldguide import workloads

    return workloads.declarations()[workloads.DEMO].playbook


def demo_spec(playbook: str | None = None, cmd: list[str] | None = None) -> TargetSpec:
    from fieldguide import workloads
    from fieldguide.walk.session import demo_command

    return TargetSpec(cmd=tuple(cmd or demo_command()), label=f"the bundled demo ({workloads.DEMO}.py)", demo=True,
                      playbook=playbook or demo_playbook())
