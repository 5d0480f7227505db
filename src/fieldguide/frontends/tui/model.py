"""Plain data and text helpers for the TUI: no Textual, no I/O.

The playbook outline shown as a tree, node states and their glyphs (the report's
vocabulary: distinct without colour, for NO_COLOR terminals), sparklines and bars
drawn with block characters, and live series drawn from what a probe declares.
The TUI knows no playbook and no probe by name: value and series names, and their
units, come from the probe registry and the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fieldguide.analysis.stats import median
from fieldguide.measurement import format_value

if TYPE_CHECKING:
    from fieldguide.playbook import Node, Playbook
    from fieldguide.playbook.expect import Condition, Expectation
    from fieldguide.walk.engine import NodeResult

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
    playbook: str | None = None  # the playbook this target comes with (the demo's), offered first
    arm: tuple[str, ...] = ()  # agent capabilities a launched job arms beside the playbook's (--memory-history)

    @property
    def kind(self) -> str:
        return "attach" if self.pid is not None else "launch"

    def describe(self) -> str:
        if self.label:
            return self.label
        if self.pid is not None:
            return f"pid {self.pid}"
        from fieldguide.report.redact import redact_argv  # a screen may be shared or recorded

        return " ".join(redact_argv(list(self.cmd)))


@dataclass
class OutlineItem:
    """One line of the playbook tree: a node, a cause, a healthy leaf, or a reference to a node shown above."""

    kind: str  # "node" | "cause" | "leaf" | "ref" | "stop"
    id: str
    children: list[OutlineItem] = field(default_factory=list)


def stop_reason(item_id: str) -> str:
    """A "stop" line's text: the reason the walk ends with no cause, without the reading it may
    quote ("{seen}"), which only a finished walk has."""
    return item_id.split(": {", 1)[0]


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
            if node.on_depart != node.on_pass:  # a depart that leads where pass does is no branch
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
    values = result.measurement.values if result.measurement is not None else dict(result.measured)
    units = result.measurement.units if result.measurement is not None else {}
    return expectation_rows(node, result.probe, values, units)


def expectation_rows(node: Node, probe: str | None, values: dict[str, Any], units: dict[str, str]) -> list[Row]:
    """Per value of the node's expectation for `probe`: measured, expected, whether it held."""
    from fieldguide.playbook.expect import NotEvaluable

    option = next((o for o in node.measure if o.probe == probe), None)
    if option is None:
        return []
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


# -- live and recorded series, drawn from what the probe declares ----------------------------------

SERIES_STYLES = ("cyan", "red", "magenta", "blue", "green", "yellow")


@dataclass(frozen=True)
class Line:
    """One line of a series panel: a label, the drawing, its style, and the numbers after it."""

    label: str
    drawing: str
    style: str = ""
    suffix: str = ""


def declared(probe_id: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """What a probe declares: its series (name -> unit; the first two are the headline pair)
    and its values (name -> unit). Nothing for a probe that is not registered."""
    if not probe_id:
        return {}, {}
    from fieldguide.probes import registry

    cls = registry.get(probe_id)
    if cls is None:
        return {}, {}
    return dict(cls.series), dict(cls.values)


def declared_parts(probe_id: str | None) -> tuple[str, ...]:
    """The values a probe declares as parts of one whole (drawn as bars)."""
    from fieldguide.probes import registry

    cls = registry.get(probe_id or "")
    return tuple(cls.parts) if cls is not None else ()


def part_bars(values: dict[str, Any], names: tuple[str, ...], width: int) -> list[tuple[str, str, str]]:
    """(label, bar, share) per part, largest first: a bar of `width` cells is the whole."""
    found = [(name, float(values[name])) for name in names if isinstance(values.get(name), (int, float))]
    found.sort(key=lambda item: item[1], reverse=True)
    return [(label(name.removesuffix("_share")), "█" * max(round(share * width), 1 if share > 0 else 0),
             f"{share:.0%}") for name, share in found]


def label(name: str) -> str:
    """A value's name as a label: `data_wait_ms` -> `data wait ms`."""
    return name.replace("_", " ")


def numbers(values: object) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


def series_lines(found: dict[str, list[float]], units: dict[str, str], width: int) -> list[Line]:
    """Sparklines of the series found, in the order the probe declares them (`units`), then any
    it did not declare. The first two declared share one scale, the second shown as a share of
    the first (a step and the wait inside it); every other series has its own scale."""
    order = [n for n in units if found.get(n)] + [n for n in found if n not in units and found[n]]
    pair = [n for n in list(units)[:2] if found.get(n)]
    lines: list[Line] = []
    top = max((v for n in pair for v in found[n]), default=0.0)
    first_median: float | None = None
    for i, name in enumerate(order):
        values, unit = found[name], units.get(name, "")
        style = SERIES_STYLES[i % len(SERIES_STYLES)]
        if name in pair:
            mid = median(values) or 0.0
            if name == pair[0]:
                first_median = mid
                suffix = f" {format_value(mid, unit)} median"
            else:
                share = f" · {mid / first_median:.0%} of {label(pair[0]).split()[0]}" if first_median else " median"
                suffix = f" {format_value(mid, unit)}{share}"
            lines.append(Line(label(name), sparkline(values, width, top), style, suffix))
        else:
            lines.append(Line(label(name), sparkline(values, width), style, f" {format_value(values[-1], unit)}"))
    return lines


def reading_lines(reading: dict[str, Any], width: int) -> tuple[list[Line], str]:
    """A live reading (Probe.reading's shape) as lines: progress, then its series; and its
    interim values as one line of text, with the units the probe declares."""
    series_units, value_units = declared(str(reading.get("probe", "")))
    lines: list[Line] = []
    elapsed, of = reading.get("elapsed"), reading.get("of")
    if isinstance(elapsed, (int, float)) and isinstance(of, (int, float)) and of > 0:
        lines.append(Line("progress", bar(elapsed / of, width), "", f" {elapsed:4.1f}/{of:.0f} s"))
    raw = reading.get("series")
    found = {str(k): numbers(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
    lines += series_lines(found, series_units, width)
    values = reading.get("values")
    text = ""
    if isinstance(values, dict):
        text = " · ".join(f"{label(str(k))} {format_value(v, value_units.get(str(k), ''))}"
                          for k, v in values.items() if v is not None and not isinstance(v, (dict, list)))
    return lines, text


# -- the GPU panel: a line per GPU ---------------------------------------------------------------------

THROTTLE_WORDS = {"sw_power_cap": "power cap", "hw_slowdown": "hw slowdown", "sw_thermal_slowdown": "thermal",
                  "hw_thermal_slowdown": "thermal (hw)", "hw_power_brake_slowdown": "power brake"}


def gpu_line(gpu: dict[str, Any]) -> tuple[str, str]:
    """One GPU as a line (nvitop's, shortened for 80 columns), and its style: util, real SM
    activity where GPM gives it, memory, power and clock against their limits, throttling."""

    def num(value: Any, spec: str = ".0f") -> str:
        return "n/a" if value is None else format(value, spec)

    mem_used, mem_total = gpu.get("memory_used_mb"), gpu.get("memory_total_mb")
    parts = [f"GPU{gpu.get('index')}", f"util {num(gpu.get('utilization_gpu'), '>3.0f')}%"]
    if gpu.get("sm_active") is not None:
        parts.append(f"SM {num(gpu.get('sm_active'), '>3.0f')}%")
    parts.append(f"mem {num(mem_used / 1024 if mem_used is not None else None, '.1f')}/"
                 f"{num(mem_total / 1024 if mem_total is not None else None)}G")
    parts.append(f"{num(gpu.get('power_w'))}/{num(gpu.get('power_limit_w'))}W")
    parts.append(f"{num(gpu.get('sm_clock_mhz'))}/{num(gpu.get('sm_clock_max_mhz'))}MHz")
    throttled = [THROTTLE_WORDS.get(r, r) for r in gpu.get("throttle_reasons") or []]
    if throttled:
        parts.append("⚠ " + ", ".join(throttled))
    return "  ".join(parts), "bold red" if throttled else ""

# The header's icon: Textual's default "⭘" is missing from common monospace fonts (a box or a
# blank in many terminals); "≡" is in all of them.
HEADER_ICON = "≡"
