"""Pictures of the series a report already holds, as inline SVG: no JavaScript, no fonts or
stylesheets to fetch, so the HTML report opens anywhere. Pure functions over plain data.

Per-step series (the ones a probe declares, and memory per step from its rows) become line
charts; the arms of a tried fix become bars (the median of their turns' mean step times) with
the quartiles of those turn means as whiskers (a worker sweep also as a line, against the job as
launched); the cold start becomes a timeline. The TUI draws the same series, taken from here
(`series_groups`, `arm_bars`, and timeline.py's `timeline_segments`), with block characters."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from statistics import median
from typing import TYPE_CHECKING, Any

from fieldguide.agent.inside.rows import MemoryRow, RssRow
from fieldguide.analysis.coldstart import Phase
from fieldguide.probes.evidence import ROWS, RSS
from fieldguide.report.drawing import COLOURS, fmt, number
from fieldguide.report.timeline import timed_phases, timeline_title

if TYPE_CHECKING:
    from fieldguide.report.findings import Findings

WIDTH, HEIGHT = 640, 160
LEFT, RIGHT, TOP, BOTTOM = 60, 118, 24, 34  # the plot area's margins
FONT = "font-family='system-ui,sans-serif' font-size='11'"
CHAR_W = 6.2  # about how wide a character of FONT is, to fit labels


@dataclass(frozen=True)
class Series:
    """One per-step series: its name, unit, values (None where there is no number) and, where
    known, each value's x (the step number); else the values' index."""

    name: str
    unit: str
    values: tuple[float | None, ...]
    xs: tuple[float, ...] | None = None


@dataclass(frozen=True)
class SeriesGroup:
    """Series drawn on one chart (a probe's headline pair shares one scale), and where they came from."""

    probe: str
    nodes: tuple[str, ...]
    series: tuple[Series, ...]


@dataclass(frozen=True)
class Bar:
    """An arm: its label, median, and quartiles (the whisker), all of its turns' mean step times;
    `x` is its worker count in a sweep."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    x: int | None = None


def label(name: str, unit: str = "") -> str:
    """A series' name as words, its unit left out: `data_wait_ms` -> `data wait`."""
    suffix = "_" + unit.lower()
    return (name[:-len(suffix)] if unit and name.lower().endswith(suffix) else name).replace("_", " ")


# -- the series a report holds ------------------------------------------------------------------------

MEMORY = "memory_used_mb"  # memory per step (or per sample), from a memory probe's rows or samples


def _mb(value: object) -> float | None:
    found = number(value)
    return None if found is None else round(found / 2**20, 2)


def _memory_series(evidence: dict[str, Any]) -> Series | None:
    """Memory per step from a memory probe's evidence: the agent's rows (memory.growth's
    `MemoryRow`s, CUDA's memory when the job uses it), or RSS samples in bytes, each a number (one
    per sample) or an `RssRow`."""
    rows, rss = ROWS.of(evidence), RSS.of(evidence)
    if isinstance(rows, list) and rows and all(isinstance(r, list) and len(r) >= len(MemoryRow._fields) for r in rows):
        steps = [MemoryRow.read(r) for r in rows]
        pairs = [(number(r.step), r.cuda_allocated if r.cuda_allocated is not None else r.rss) for r in steps]
    elif isinstance(rss, list) and rss and all(isinstance(r, list) and len(r) >= len(RssRow._fields) for r in rss):
        pairs = [(number(r.step), r.rss) for r in map(RssRow.read, rss)]
    elif isinstance(rss, list) and rss:
        return Series(MEMORY, "MB", tuple(_mb(v) for v in rss))
    else:
        return None
    kept = [(x, v) for x, v in pairs if x is not None]
    return Series(MEMORY, "MB", tuple(_mb(v) for _, v in kept), tuple(x for x, _ in kept))


def evidence_series(evidence: dict[str, Any]) -> list[Series]:
    """The series a node's evidence holds under the names its probe declares (in that order), and
    memory per step where a memory probe left rows or samples instead."""
    from fieldguide.probes import registry

    cls = registry.get(str(evidence.get("probe") or ""))
    found = []
    for name, unit in (cls.series if cls is not None else {}).items():
        raw = evidence.get(name)
        if isinstance(raw, list):
            values = tuple(number(v) for v in raw)
            if any(v is not None for v in values):
                found.append(Series(name, unit, values))
    memory = _memory_series(evidence) if not any(s.name == "used_mb" for s in found) else None
    if memory is not None and any(v is not None for v in memory.values):
        found.append(memory)
    return found


def series_groups(findings: Findings, nodes: list[str] | None = None) -> list[SeriesGroup]:
    """One chart's worth per distinct set of series in the evidence of `nodes` (all, by default),
    in the path's order: a probe's series that share a unit share a chart (a step and the wait
    inside it). Nodes that share one probe run share its charts."""
    groups: dict[tuple[Series, ...], list[str]] = {}
    probes: dict[tuple[Series, ...], str] = {}
    for node in nodes if nodes is not None else list(findings.evidence):
        evidence = findings.evidence.get(node)
        if not isinstance(evidence, dict):
            continue
        found = evidence_series(evidence)
        for unit in dict.fromkeys(s.unit for s in found):
            key = tuple(s for s in found if s.unit == unit)
            groups.setdefault(key, []).append(node)
            probes.setdefault(key, str(evidence.get("probe") or ""))
    return [SeriesGroup(probes[k], tuple(dict.fromkeys(v)), k) for k, v in groups.items()]


def arm_bars(experiment: dict[str, Any]) -> list[Bar]:
    """A tried fix's arms as bars (the job as launched first); `x` set on the arms of a worker sweep
    (their `setting` is num_workers, its `value` the count).
    The bar is the median of the arm's turns' mean step times, the whisker the quartiles of the same
    turn means. A report from before they were (its quartiles were of single steps, which a bursty
    loader puts far from the median) has quartiles that need not contain the median: no whisker then."""
    bars = []
    for arm in experiment.get("arms") or []:
        workers = number(arm.get("value")) if arm.get("setting") == "num_workers" else None
        value, low, high = number(arm.get("step_ms")), number(arm.get("step_ms_q1")), number(arm.get("step_ms_q3"))
        if value is None or low is None or high is None or not low <= value <= high:
            low = high = None
        bars.append(Bar(str(arm.get("arm", "")), value, low, high, int(workers) if workers is not None else None))
    return bars


# -- drawing ---------------------------------------------------------------------------------------------

def _svg(title: str, body: list[str], height: int = HEIGHT) -> str:
    return (f"<svg xmlns='http://www.w3.org/2000/svg' role='img' width='{WIDTH}' height='{height}' "
            f"viewBox='0 0 {WIDTH} {height}' {FONT}><title>{escape(title)}</title>"
            f"<text x='4' y='14' font-weight='bold'>{escape(title)}</text>" + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", fill: str = "#57606a") -> str:
    return f"<text x='{x:.1f}' y='{y:.1f}' text-anchor='{anchor}' fill='{fill}'>{escape(text)}</text>"


def _fit(text: str, room: float) -> str:
    chars = max(int(room / CHAR_W), 1)
    return text if len(text) <= chars else text[:max(chars - 1, 0)] + "…"


def empty_chart(title: str, why: str = "no numbers to draw") -> str:
    return _svg(title, [_text(WIDTH / 2, HEIGHT / 2, why, "middle")])


def line_chart(title: str, series: list[Series], x_label: str = "step") -> str:
    """Per-step series on one scale: a line per series (broken where a value is missing), the
    first one's min, median and max marked, the axes labelled with the unit."""
    drawn = [s for s in series if any(v is not None for v in s.values)]
    if not drawn:
        return empty_chart(title)
    unit = drawn[0].unit
    points = [[(float(s.xs[i]) if s.xs else float(i), v) for i, v in enumerate(s.values) if v is not None]
              for s in drawn]
    xs = [x for p in points for x, _ in p]
    ys = [y for p in points for _, y in p]
    lo, hi = min(ys), max(ys)
    lo = 0.0 if 0 <= lo < hi / 2 else lo
    if hi - lo < 1e-9 * max(abs(hi), 1.0):
        lo, hi = lo - max(abs(lo) * 0.1, 1.0), hi + max(abs(hi) * 0.1, 1.0)
    x0, x1 = min(xs), max(xs)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (plot_w / 2 if x1 == x0 else (x - x0) / (x1 - x0) * plot_w)

    def py(y: float) -> float:
        return TOP + plot_h - (y - lo) / (hi - lo) * plot_h

    body = [f"<rect x='{LEFT}' y='{TOP}' width='{plot_w}' height='{plot_h}' fill='none' stroke='#d0d7de'/>",
            _text(LEFT - 4, TOP + 8, fmt(hi, unit), "end"), _text(LEFT - 4, TOP + plot_h, fmt(lo, unit), "end"),
            _text(LEFT, HEIGHT - 8, f"{x_label} {x0:g}"), _text(LEFT + plot_w, HEIGHT - 8, f"{x1:g}", "end")]
    for i, s in enumerate(drawn):
        colour = COLOURS[i % len(COLOURS)]
        body.append(f"<g class='series' data-name='{escape(s.name)}' stroke='{colour}' fill='{colour}'>")
        run: list[tuple[float, float]] = []
        for j, v in enumerate(s.values + (None,)):
            if v is not None:
                run.append((px(float(s.xs[j]) if s.xs else float(j)), py(v)))
                continue
            if len(run) == 1:
                body.append(f"<circle cx='{run[0][0]:.1f}' cy='{run[0][1]:.1f}' r='2'/>")
            elif run:
                body.append("<polyline fill='none' stroke-width='1.5' points='"
                            + " ".join(f"{x:.1f},{y:.1f}" for x, y in run) + "'/>")
            run = []
        body.append("</g>")
        lx = WIDTH - 110 * (len(drawn) - i)  # the legend, on the title's line from the right
        body.append(f"<rect x='{lx}' y='6' width='8' height='8' fill='{colour}'/>" + _text(lx + 12, 14, _fit(
            label(s.name, s.unit), 94)))
    first = [y for _, y in points[0]]
    mid = median(first)
    body.append(f"<line class='median' x1='{LEFT}' x2='{LEFT + plot_w}' y1='{py(mid):.1f}' y2='{py(mid):.1f}' "
                "stroke='#57606a' stroke-dasharray='4 3'/>")
    below = 0.0  # each label at least a line under the one above it
    for value, words in ((max(first), "max"), (mid, "median"), (min(first), "min")):
        below = max(py(value) + 4, below + 12)
        body.append(_text(LEFT + plot_w + 4, below, f"{words} {fmt(value, unit)}"))
    return _svg(title, body)


def bar_chart(title: str, bars: list[Bar], unit: str = "ms", reference: Bar | None = None,
              line: bool = False, names: tuple[str, str] = ("arm", "median")) -> str:
    """A bar per arm at its median, a whisker over its quartiles, its label and median under it; `line` joins
    the medians (a sweep), `reference` is drawn as a dashed level (the job as launched)."""
    shown = [b for b in bars if b.value is not None]
    if not shown:
        return empty_chart(title, "no arm timed any step")
    level = reference.value if reference is not None and reference.value is not None else 0.0
    top = max([b.value or 0.0 for b in shown] + [b.high or 0.0 for b in shown] + [level]) * 1.15 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / len(shown)

    def py(y: float) -> float:
        return TOP + plot_h - y / top * plot_h

    body = [f"<line x1='{LEFT}' x2='{LEFT + plot_w}' y1='{TOP + plot_h}' y2='{TOP + plot_h}' stroke='#57606a'/>",
            _text(LEFT - 4, TOP + 8, fmt(top, unit), "end"), _text(LEFT - 4, TOP + plot_h, f"0 {unit}", "end")]
    centres = []
    for i, b in enumerate(shown):
        assert b.value is not None
        cx, w = LEFT + slot * (i + 0.5), min(slot * 0.6, 60)
        centres.append((cx, py(b.value)))
        colour = COLOURS[0] if reference is not None or i else COLOURS[6]
        body.append(f"<g class='bar'><title>{escape(b.label)}: {escape(fmt(b.value, unit))}</title>"
                    f"<rect x='{cx - w / 2:.1f}' y='{py(b.value):.1f}' width='{w:.1f}' "
                    f"height='{TOP + plot_h - py(b.value):.1f}' fill='{colour}' fill-opacity='0.75'/>")
        if b.low is not None and b.high is not None:
            body.append(f"<path class='whisker' d='M{cx:.1f},{py(b.low):.1f}V{py(b.high):.1f}"
                        f"M{cx - 5:.1f},{py(b.low):.1f}h10M{cx - 5:.1f},{py(b.high):.1f}h10' stroke='#24292f'/>")
        body.append(_text(cx, HEIGHT - 18, _fit(str(b.x) if b.x is not None else b.label, slot - 4), "middle")
                    + _text(cx, HEIGHT - 4, fmt(b.value), "middle", "#24292f") + "</g>")
    if line and len(centres) > 1:
        body.append(f"<polyline class='sweep' fill='none' stroke='{COLOURS[1]}' stroke-width='1.5' points='"
                    + " ".join(f"{x:.1f},{y:.1f}" for x, y in centres) + "'/>")
    if reference is not None and reference.value is not None:
        y = py(reference.value)
        body.append(f"<line class='reference' x1='{LEFT}' x2='{LEFT + plot_w}' y1='{y:.1f}' y2='{y:.1f}' "
                    f"stroke='{COLOURS[6]}' stroke-dasharray='5 3'/>"
                    + _text(LEFT + plot_w + 4, y - 2, _fit(reference.label, RIGHT - 6))
                    + _text(LEFT + plot_w + 4, y + 11, fmt(reference.value, unit)))
    body.append(_text(LEFT - 4, HEIGHT - 18, "workers" if line else names[0], "end")
                + _text(LEFT - 4, HEIGHT - 4, names[1], "end"))
    return _svg(title, body)


def timeline_chart(title: str, phases: list[Phase], total_s: float | None = None) -> str:
    """The cold start as one horizontal bar: a segment per phase, as wide as its seconds, labelled
    where it has room; every phase also in the legend under it."""
    found = [(title, start, seconds) for _, title, start, seconds in timed_phases(phases)]
    end = max([s + d for _, s, d in found] + [number(total_s) or 0.0])
    if not found or end <= 0:
        return empty_chart(title, "no phases timed")
    rows = (len(found) + 2) // 3
    height = 78 + 14 * rows
    plot_w = WIDTH - 16
    body = [_text(8, 62, "0 s"), _text(8 + plot_w, 62, fmt(end, "s"), "end")]
    for i, (name, start, seconds) in enumerate(found):
        colour = COLOURS[i % len(COLOURS)]
        x, w = 8 + start / end * plot_w, seconds / end * plot_w
        body.append(f"<g><title>{escape(name)}: {escape(fmt(seconds, 's'))}</title><rect class='phase' "
                    f"x='{x:.2f}' y='24' width='{w:.2f}' height='24' fill='{colour}' fill-opacity='0.8'/>")
        words = f"{name} {fmt(seconds, 's')}"
        if w > len(words) * CHAR_W + 6:
            body.append(_text(x + 3, 40, words, fill="#ffffff"))
        body.append("</g>")
        lx, ly = 8 + (i % 3) * (plot_w / 3), 80 + 14 * (i // 3)
        body.append(f"<rect x='{lx:.1f}' y='{ly - 8}' width='8' height='8' fill='{colour}'/>"
                    + _text(lx + 12, ly, _fit(words, plot_w / 3 - 16)))
    return _svg(title, body, height)


# -- the charts of a report ----------------------------------------------------------------------------

SPREAD = "the median of the turns' mean step times, whiskers from their first to their third quartile"


def charts_for(findings: Findings) -> list[tuple[str, str]]:
    """(caption, svg) per picture the findings hold: each distinct per-step series, each tried fix,
    and the cold start."""
    charts = []
    for group in series_groups(findings):
        first = group.series[0]
        x_label = "step" if first.xs is not None or first.unit == "ms" else "sample"
        title = f"{' and '.join(label(s.name, s.unit) for s in group.series)} per {x_label}, {first.unit}"
        charts.append((f"{title} ({group.probe} at {', '.join(group.nodes)})",
                       line_chart(title, list(group.series), x_label)))
    for exp in findings.experiments:
        bars = arm_bars(exp)
        if not exp.get("ran") or not any(b.value is not None for b in bars):
            continue
        sweep = [b for b in bars if b.x is not None]
        if len(sweep) >= 2:
            rest = [b for b in bars if b.x is None]
            title = f"Worker sweep for {exp.get('cause')}: ms per step by num_workers"
            svg = bar_chart(title, sorted(sweep, key=lambda b: b.x or 0), reference=rest[0] if rest else None,
                            line=True)
            said = "; dashed: the job as launched" + (f"; the sweep {exp['shape']}" if exp.get("shape") else "")
            charts.append((f"{title} ({SPREAD}{said})", svg))
        else:
            title = f"Fix of {exp.get('cause')}: ms per step, before and after"
            charts.append((f"{title} ({SPREAD})", bar_chart(title, bars)))
    charts += memory_charts(findings)
    cold = findings.cold_start
    if isinstance(cold, dict) and isinstance(cold.get("phases"), list):
        total = number(cold.get("total_s"))
        title = timeline_title(cold)
        charts.append((f"{title} (a segment per phase, as wide as its seconds)",
                       timeline_chart(title, cold["phases"], total)))
    return charts


MEMORY_PARTS = (("activations", "activations_mb"), ("optimizer state", "optimizer_state_mb"),
                ("parameters", "parameters_mb"), ("gradients", "gradients_mb"), ("other tensors", "other_mb"))


def memory_charts(findings: Findings) -> list[tuple[str, str]]:
    """What memory holds (a memory.breakdown's parts, MB), once: the picture of the census on a
    job whose allocator keeps no snapshot (CPU tensors), beside memory_viz's on CUDA."""
    for node, evidence in findings.evidence.items():
        if not isinstance(evidence, dict) or evidence.get("probe") != "memory.breakdown":
            continue
        values = evidence.get("values")
        if not isinstance(values, dict):
            continue
        bars = [Bar(name, float(values[key])) for name, key in MEMORY_PARTS
                if isinstance(values.get(key), (int, float))]
        if not bars:
            continue
        when = "at the out-of-memory error" if values.get("oom") else "at its peak step"
        title = f"What memory holds {when}, MB"
        limit = values.get("limit_mb")
        said = f"; the tightest limit ({values.get('limit')}) is {limit} MB" if isinstance(limit, (int, float)) else ""
        snapshot = str(values.get("snapshot") or "")
        if snapshot.startswith("none: "):
            said += f". No allocator snapshot: {snapshot[len('none: '):]}"
        return [(f"{title} ({node}: tensors by what keeps them, unique storage{said})",
                 bar_chart(title, bars, unit="MB", names=("held by", "MB")))]
    return []
