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

    if not cmd:  # the walk's machinery loads only when asked for the command (~100 ms before a first frame)
        from fieldguide.walk.session import demo_command

        cmd = demo_command()
    return TargetSpec(cmd=tuple(cmd), label=f"the bundled demo ({workloads.DEMO}.py)", demo=True,
                      playbook=playbook or demo_playbook())
