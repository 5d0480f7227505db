"""The playbook's tree: every node with its state; causes and healthy leaves it can lead to."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from fieldguide.frontends.tui.model import (
    CAUSE_GLYPH,
    CAUSE_REACHED_GLYPH,
    LEAF_GLYPH,
    LEAF_REACHED_GLYPH,
    OutlineItem,
    playbook_outline,
    stop_reason,
)
from fieldguide.playbook import Playbook
from fieldguide.report.vocabulary import GLYPH, STYLE, WAITING

Item = tuple[str, str]  # (kind, id): kind is "node", "ref", "cause", "leaf" or "stop" (id: why it stops)


class PlaybookTree(Tree[Item]):
    """A node's pass edge is the next line at its level; its depart edge is nested under it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "run_cursor", "Run node", tooltip="Jump to the node under the cursor and measure it"),
    ]

    class RunRequested(Message):
        def __init__(self, kind: str, item_id: str) -> None:
            super().__init__()
            self.kind, self.item_id = kind, item_id

    def __init__(self, playbook: Playbook, *, id: str | None = None) -> None:
        super().__init__(playbook.title, data=("root", playbook.id), id=id)
        self.show_root = False
        self.auto_expand = False
        self.guide_depth = 3
        self.playbook = playbook
        self.states: dict[str, str] = {node_id: WAITING for node_id in playbook.nodes}
        self.reached: set[str] = set()
        self._lines: dict[str, list[TreeNode[Item]]] = {}
        for item in playbook_outline(playbook):
            self._add(self.root, item)
        self.root.expand()

    def _add(self, parent: TreeNode[Item], item: OutlineItem) -> None:
        data = (item.kind, item.id)
        label = self._label(data)
        if item.children:
            node = parent.add(label, data=data, expand=True, allow_expand=False)  # always open: no toggles
            for child in item.children:
                self._add(node, child)
        else:
            node = parent.add_leaf(label, data=data)
        self._lines.setdefault(item.id, []).append(node)

    def _label(self, data: Item) -> Text:
        kind, item_id = data
        if kind in ("node", "ref"):
            state = self.states.get(item_id, WAITING)
            name = ("↪ " if kind == "ref" else "") + item_id
            return Text.assemble((GLYPH[state], STYLE[state]), " ", (name, "" if state == WAITING else STYLE[state]))
        reached = item_id in self.reached
        if kind == "stop":  # the walk ends here with no cause
            return Text.assemble(("■", "dim"), " ", (stop_reason(item_id), "italic dim"))
        if kind == "cause":
            return Text.assemble((CAUSE_REACHED_GLYPH if reached else CAUSE_GLYPH, "bold red" if reached else "dim"),
                                 " ", (item_id, "bold red" if reached else "italic dim"))
        return Text.assemble((LEAF_REACHED_GLYPH if reached else LEAF_GLYPH, "bold green" if reached else "dim"),
                             " ", (item_id, "bold green" if reached else "italic dim"))

    def set_state(self, node_id: str, state: str) -> None:
        self.states[node_id] = state
        for line in self._lines.get(node_id, []):
            assert line.data is not None
            line.set_label(self._label(line.data))

    def mark_reached(self, item_id: str) -> None:
        """The walk ended at this cause or healthy leaf."""
        self.reached.add(item_id)
        for line in self._lines.get(item_id, []):
            assert line.data is not None
            line.set_label(self._label(line.data))

    def move_to(self, item_id: str) -> None:
        lines = self._lines.get(item_id)
        if lines:
            self.move_cursor(lines[0])

    @property
    def cursor_item(self) -> Item | None:
        node = self.cursor_node
        return node.data if node is not None else None

    def action_run_cursor(self) -> None:
        item = self.cursor_item
        if item is not None:
            self.post_message(self.RunRequested(*item))
