"""The report as typed sections, built once from the (redacted) findings (and `report merge`'s
view from its merged reports): every document format (report/formats/) renders such a list, and
none walks the findings itself. Text stays as it is here; each format escapes it for its own
syntax, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fieldguide import __version__
from fieldguide.coldstart import SHARE_TITLES
from fieldguide.measurement import format_value
from fieldguide.report.charts import charts_for
from fieldguide.report.findings import Findings
from fieldguide.report.summary import EXPERIMENT_COLUMNS
from fieldguide.report.timeline import cold_start_of, timed_phases, timeline_title
from fieldguide.report.vocabulary import ACTION_TEXT, status_mark, verdict_text

LOG_LINES = 20  # the target's last output lines shown in a report


@dataclass(frozen=True)
class Span:
    """A run of inline text: plain, `code`, or bold."""

    text: str
    style: str = ""  # "" | "code" | "bold"


def code(text: object) -> Span:
    return Span(str(text), "code")


@dataclass(frozen=True)
class Title:
    text: str


@dataclass(frozen=True)
class Facts:
    """Labelled lines under the title: the target, the environment, when."""

    items: tuple[tuple[str, tuple[Span, ...]], ...]


@dataclass(frozen=True)
class Verdict:
    verdict: str  # departure | clean | inconclusive
    text: str


@dataclass(frozen=True)
class Heading:
    level: int  # 2: a part of the report, 3: within one
    text: str


@dataclass(frozen=True)
class Paragraph:
    spans: tuple[Span, ...]
    kind: str = ""  # "" | "note" (quoted) | "error"


@dataclass(frozen=True)
class Cell:
    text: str
    code: bool = False
    status: str = ""  # a node status the cell shows: formats may colour it


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class FixPage:
    """A cause's page: why it costs, the fix as steps (report/fixsteps.py), how to verify."""

    why: str
    fix: tuple[str, ...]
    verify: str


@dataclass(frozen=True)
class Figure:
    """A chart (inline SVG, report/charts.py): drawn by the formats that can show one."""

    caption: str
    svg: str


@dataclass(frozen=True)
class Preformatted:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


Section = Title | Facts | Verdict | Heading | Paragraph | Table | FixPage | Figure | Preformatted | Bullets


def _table(columns: tuple[str, ...], rows: list[list[Cell]]) -> Table:
    return Table(columns, tuple(tuple(r) for r in rows))


def _cells(*texts: object) -> list[Cell]:
    return [Cell(str(t)) for t in texts]


def _share(seconds: float, total: object) -> str:
    return f"{seconds / total:.0%}" if isinstance(total, (int, float)) and total > 0 else ""


def _environment_words(env: dict[str, Any]) -> str:
    nvml = env.get("nvml")
    return (f"Python {env.get('python')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
            f"{env.get('cpu_cores')} CPU cores, {len(env.get('gpus') or [])} GPUs"
            + (f" ({nvml})" if nvml and nvml != "ok" else ""))


def _measured(findings: Findings, measured: dict[str, Any]) -> str:
    return ", ".join(f"{n}={v}" for n, v in findings.formatted(measured))


def _steps_rows(f: Findings, steps: list[dict[str, Any]], *, reruns: bool = False) -> list[list[Cell]]:
    rows = []
    for step in steps:
        cells = [Cell(str(step["node"])), Cell(status_mark(step["status"]), status=str(step["status"])),
                 Cell(_measured(f, step.get("measured") or {})), Cell(str(step.get("expected", "")), code=True)]
        if reruns:
            cells = [Cell(str(step.get("when", ""))), Cell(ACTION_TEXT.get(step["action"], step["action"])), *cells]
        else:
            cells.append(Cell(str(step.get("probe") or "")))
        cells += [Cell(f"{float(step.get('seconds') or 0):.1f}"), Cell(str(step.get("note", "")))]
        rows.append(cells)
    return rows


def _departure(f: Findings) -> list[Section]:
    dep = f.first_departure
    if not dep:
        return [Paragraph((Span("Healthy leaf "), code(f.conclusion), Span(f": {f.conclusion_text}"))),
                ] if f.conclusion else []
    return [Heading(3, str(dep["title"])),
            Paragraph((Span("Cause "), code(dep["cause"]), Span(" at node "), code(dep["node"]), Span("."))),
            Paragraph((Span(str(dep["summary"])),)),
            _table(("measured", "value"), [_cells(n, v) for n, v in f.formatted(dep["measured"])]),
            Paragraph((Span("Expected: "), code(dep["expected"]))),
            FixPage(str(dep.get("why", "")), tuple(dep["fix"]), str(dep["verify"]))]


def _found(f: Findings) -> list[Section]:
    rows = f.found_rows()
    if not rows:
        return []
    dep = f.first_departure
    columns = tuple(dict.fromkeys(k for r in rows for k in r))
    return [Heading(3, f"What {dep['node'] if dep else 'the node'} found"),
            _table(columns, [[Cell(format_value(r.get(c))) for c in columns] for r in rows])]


def _experiments(f: Findings) -> list[Section]:
    found: list[Section] = []
    for title, arm_rows, said in f.experiment_rows():
        found.append(Heading(3, title))
        if arm_rows:
            found.append(_table(tuple(EXPERIMENT_COLUMNS), [_cells(*row) for row in arm_rows]))
        found.append(Paragraph((Span(said),)))
    return found


def _cold_start(f: Findings) -> list[Section]:
    """The time to steady steps, the timeline's phases and where the time went (the disjoint
    shares, largest first); what a node of the walk measured, else the walk's own."""
    cold, _ = cold_start_of(f, [str(step["node"]) for step in f.path])
    if cold is None:
        return []
    total = cold.get("total_s")
    found: list[Section] = [
        Heading(2, "Cold start"), Paragraph((Span(timeline_title(cold).removeprefix("Cold start: ") + "."),)),
        _table(("phase", "from s", "seconds", "share"),
               [_cells(title, f"{start:.3g}", f"{seconds:.3g}", _share(seconds, total))
                for _, title, start, seconds in timed_phases(cold.get("phases"))])]
    shares = cold.get("shares")
    spent = sorted(((str(n), float(v)) for n, v in (shares.items() if isinstance(shares, dict) else [])
                    if isinstance(v, (int, float)) and not isinstance(v, bool)), key=lambda item: -item[1])
    if spent:
        found.append(_table(("where the time went", "seconds", "share"),
                            [_cells(SHARE_TITLES.get(name, name), f"{seconds:.3g}", _share(seconds, total))
                             for name, seconds in spent]))
    return found


def _percent(share: object) -> str:
    return f"{share:.0%}" if isinstance(share, (int, float)) else str(share)


def report_sections(findings: Findings) -> list[Section]:
    """Every part of a report, in order, from the findings as they may be shown (redacted)."""
    f = findings.redacted()
    cmd = " ".join(str(a) for a in f.target.get("cmdline") or [])
    target = (Span(f"{f.target.get('kind')} pid {f.target.get('pid')}"),) + ((Span(" — "), code(cmd)) if cmd else ())
    sections: list[Section] = [
        Title(f"fieldguide report: {f.playbook_title}"),
        Facts((("Target", target), ("Environment", (Span(_environment_words(f.environment)),)),
               ("Created", (Span(f"{f.created} by fieldguide {__version__}"),)))),
        Verdict(f.verdict, verdict_text(f.verdict)),
        *_departure(f), *_found(f)]
    trace = f.torch_trace()
    if trace:
        sections.append(Paragraph((Span("Compile trace (TORCH_TRACE) in "), code(trace), Span(": open it with "),
                                   code(f"pip install tlparse; tlparse {trace}"), Span("."))))
    sections += _experiments(f)
    if f.exit:
        sections.append(Paragraph((Span(f.exit_line(), "bold"),), kind="error"))
    if f.note:
        sections.append(Paragraph((Span(f.note),), kind="note"))
    sections += _cold_start(f)
    charts = charts_for(f)
    if charts:
        sections += [Heading(2, "Charts"), *(Figure(caption, svg) for caption, svg in charts)]
    sections += [Heading(2, "Path"),
                 _table(("node", "status", "measured", "expected", "probe", "s", "note"), _steps_rows(f, f.path))]
    if f.reruns:
        sections += [Heading(2, "Measured again in the TUI"),
                     _table(("when", "did", "node", "status", "measured", "expected", "s", "note"),
                            _steps_rows(f, f.reruns, reruns=True))]
    whose, stacks = f.top_stacks()
    if stacks:
        sections += [Heading(2, f"Top stacks ({whose})"),
                     _table(("share", "where", "stack (innermost first)"),
                            [[Cell(_percent(s.get("share"))), Cell(str(s.get("category", ""))),
                              Cell(str(s.get("stack", "")), code=True)] for s in stacks])]
    if f.log_tail:
        sections += [Heading(2, "Target output (last lines)"),
                     Preformatted(tuple(str(line) for line in f.log_tail[-LOG_LINES:]))]
    return sections
