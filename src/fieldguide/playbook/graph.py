"""Checks on a playbook's node graph: a walk must end.

Iterative with colours (white, grey: on the current path, black: finished): every node and edge
is looked at once. A recursive search with the path as its memory was exponential on a ladder
(each node leading twice to the next) and hit RecursionError on a long chain.
"""

from __future__ import annotations

from pathlib import Path

from fieldguide.playbook.schema import Node
from fieldguide.playbook.source import PlaybookError

_GREY, _BLACK = 1, 2


def _next_nodes(node: Node) -> list[str]:
    return [e.target for e in (node.on_pass, node.on_depart, node.on_error) if e is not None and e.kind == "node"]


def check_acyclic(nodes: dict[str, Node], start: str, path: Path) -> None:
    """No edge reachable from `start` may lead back to a node on the way to it; the error names
    the cycle, `a -> b -> a`, at the node where it starts and ends. Edges must land on known
    nodes (checked before)."""
    colour: dict[str, int] = {start: _GREY}
    trail = [start]  # the grey nodes, in order
    pending = [iter(_next_nodes(nodes[start]))]  # per grey node: the edges not yet followed
    while pending:
        target = next(pending[-1], None)
        if target is None:  # all of this node's edges followed
            colour[trail.pop()] = _BLACK
            pending.pop()
            continue
        seen = colour.get(target)
        if seen == _GREY:
            loop = [*trail[trail.index(target):], target]
            raise PlaybookError(path, nodes[target].line, f"cycle: {' -> '.join(loop)}", node=target)
        if seen is None:
            colour[target] = _GREY
            trail.append(target)
            pending.append(iter(_next_nodes(nodes[target])))
