"""The bundled demo as a target: its command, its label, and the playbook it comes with. The TUI
names no playbook: the demo's is the installed playbook that can name the cause the demo
workload was built to show (fieldguide.workloads), unless the caller says which."""

from __future__ import annotations

from fieldguide.tui.model import TargetSpec


def demo_playbook() -> str | None:
    """The id of the first installed playbook with an edge to the demo workload's cause."""
    from fieldguide import workloads
    from fieldguide.errors import FieldguideError
    from fieldguide.playbook import list_playbooks

    cause = workloads.WORKLOADS[workloads.DEMO]
    try:
        playbooks = list_playbooks([])
    except FieldguideError:
        return None
    for playbook in playbooks:
        for node in playbook.nodes.values():
            edges = (node.on_pass, node.on_depart, node.on_error)
            if any(edge is not None and edge.kind == "cause" and edge.target == cause for edge in edges):
                return playbook.id
    return None


def demo_spec(playbook: str | None = None, cmd: list[str] | None = None) -> TargetSpec:
    from fieldguide import workloads
    from fieldguide.session import demo_command

    return TargetSpec(cmd=tuple(cmd or demo_command()), label=f"the bundled demo ({workloads.DEMO}.py)", demo=True,
                      playbook=playbook or demo_playbook())
