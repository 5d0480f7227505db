"""Plain data and text helpers for the TUI: no Textual, no I/O.

The playbook outline shown as a tree, node states and their glyphs (distinct
without colour, for NO_COLOR terminals), sparklines and bars drawn with block
characters, and the departure's field-guide page as Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fieldguide.measurement import format_value

if TYPE_CHECKING:
    from fieldguide.engine import Departure, NodeResult
    from fieldguide.playbook import Node, Playbook
    from fieldguide.playbook.expect import Condition, Expectation

WAITING, MEASURING = "waiting", "measuring"
PASS, DEPART, SKIP, ERROR = "pass", "depart", "skip", "error"
STATES = (WAITING, MEASURING, PASS, DEPART, SKIP, ERROR)

# Each state has its own glyph, so the tree reads the same with NO_COLOR.
GLYPH = {WAITING: "·", MEASURING: "▸", PASS: "✓", DEPART: "✗", SKIP: "–", ERROR: "!"}
STYLE = {WAITING: "dim", MEASURING: "bold yellow", PASS: "green", DEPART: "bold red", SKIP: "dim italic",
         ERROR: "magenta"}
CAUSE_GLYPH, CAUSE_REACHED_GLYPH = "◇", "◆"
LEAF_GLYPH, LEAF_REACHED_GLYPH = "○", "●"

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class TargetSpec:
    """What the user chose to diagnose: an attached pid or a command to launch."""

    pid: int | None = None
    cmd: tuple[str, ...] = ()
    label: str = ""
    demo: bool = False

    @property
    def kind(self) -> str:
        return "attach" if self.pid is not None else "launch"

    def describe(self) -> str:
        if self.label:
            return self.label
        if self.pid is not None:
            return f"pid {self.pid}"
        return " ".join(self.cmd)


@dataclass
class OutlineItem:
    """One line of the playbook tree: a node, a cause, a healthy leaf, or a reference to a node shown above."""

    kind: str  # "node" | "cause" | "leaf" | "ref"
    id: str
    children: list[OutlineItem] = field(default_factory=list)


def playbook_outline(playbook: Playbook) -> list[OutlineItem]:
    """The playbook as a checklist: a node's pass edge is the next line at the same level,
    its depart edge is nested under it. A node already shown becomes a reference."""
    shown: set[str] = set()

    def edge_items(kind: str, target: str) -> list[OutlineItem]:
        if kind == "node":
            if target in shown:
                return [OutlineItem("ref", target)]
            return spine(target)
        return [OutlineItem(kind, target)]

    def spine(start: str) -> list[OutlineItem]:
        items: list[OutlineItem] = []
        node_id: str | None = start
        while node_id is not None:
            node = playbook.nodes[node_id]
            shown.add(node_id)
            item = OutlineItem("node", node_id)
            items.append(item)
            item.children = edge_items(node.on_depart.kind, node.on_depart.target)
            nxt = node.on_pass
            node_id = None
            if nxt.kind == "node" and nxt.target not in shown:
                node_id = nxt.target
            else:
                items.extend(edge_items(nxt.kind, nxt.target))
        return items

    items = spine(playbook.start)
    for node_id in playbook.nodes:  # reachable only through an error edge: still listed, so it can be run
        if node_id not in shown:
            items.extend(spine(node_id))
    return items


def sparkline(values: list[float], width: int, top: float | None = None) -> str:
    """The last `width` values as block characters on a 0..top scale (top: the largest value)."""
    if width <= 0:
        return ""
    values = [float(v) for v in values if v is not None][-width:]
    if not values:
        return ""
    top = max(values) if top is None else top
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, max(0, int(v / top * (len(SPARK) - 1) + 0.5)))] for v in values)


def bar(fraction: float, width: int) -> str:
    """A progress bar that needs no colour: filled and empty blocks."""
    fraction = min(1.0, max(0.0, fraction))
    filled = int(round(fraction * width))
    return "█" * filled + "░" * (width - filled)




def _conditions(expect: Expectation | Condition) -> list[Condition]:
    parts = getattr(expect, "parts", None)
    if parts is None:
        return [expect]  # type: ignore[list-item]
    out: list[Condition] = []
    for part in parts:
        out.extend(_conditions(part))
    return out


OP_TEXT = {"below": "<", "above": ">", "at_most": "≤", "at_least": "≥", "equals": "=", "not_equals": "≠", "in": "in"}


@dataclass(frozen=True)
class Row:
    """One line of "measured vs expected"."""

    name: str
    measured: str
    expected: str
    held: bool | None  # None: could not be evaluated


def measured_vs_expected(node: Node, result: NodeResult) -> list[Row]:
    """Per value: what was measured, what the node expected, whether it held."""
    from fieldguide.playbook.expect import NotEvaluable

    option = next((o for o in node.measure if o.probe == result.probe), None)
    if option is None:
        return []
    values = result.measurement.values if result.measurement is not None else dict(result.measured)
    units = result.measurement.units if result.measurement is not None else {}
    rows = []
    for cond in _conditions(option.expect):
        operand = cond.operand
        unit = units.get(cond.name, "")
        if isinstance(operand, bool):
            expected = "no" if operand is False else "yes"
            expected = f"{'=' if cond.op == 'equals' else '≠'} {expected}"
        elif isinstance(operand, float) and unit == "fraction":
            expected = f"{OP_TEXT[cond.op]} {operand:.0%}"
        else:
            expected = f"{OP_TEXT[cond.op]} {operand}"
        try:
            held: bool | None = cond.holds(values)
        except NotEvaluable:
            held = None
        rows.append(Row(cond.name, format_value(values.get(cond.name), unit), expected, held))
    return rows


def _fix_steps_markdown(steps: tuple[str, ...] | list[str]) -> list[str]:
    lines: list[str] = []
    for i, step in enumerate(steps, 1):
        body = step.strip().splitlines()
        lines.append(f"{i}. {body[0]}")
        lines += [f"   {ln}" if ln.strip() else "" for ln in body[1:]]
        lines.append("")
    return lines


def departure_markdown(departure: Departure) -> str:
    """The cause's field-guide page: why it costs, how to fix (with code), how to verify."""
    cause = departure.cause
    lines = ["## Why it costs", "", cause.why.strip(), "", "## Fix", ""]
    lines += _fix_steps_markdown(cause.fix)
    lines += ["## Verify", "", cause.verify.strip(), ""]
    return "\n".join(lines)


def top_stacks(departure: Departure, limit: int = 3) -> list[dict[str, Any]]:
    """The departure's most frequent stacks (main process first, then workers)."""
    for evidence in departure.evidence.values():
        stacks = evidence.get("top_stacks") or evidence.get("top_worker_stacks")
        if stacks:
            return list(stacks)[:limit]
    return []


def series(departure: Departure) -> dict[str, list[float]]:
    """Per-step series in the departure's evidence: step time and data wait (ms), RSS (MB)."""
    out: dict[str, list[float]] = {}
    for evidence in departure.evidence.values():
        for key in ("step_ms", "data_wait_ms", "rss_mb"):
            if key not in out and isinstance(evidence.get(key), list) and evidence[key]:
                out[key] = [float(v) for v in evidence[key] if isinstance(v, (int, float))]
    return out
