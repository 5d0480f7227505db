"""The report as typed sections (report/section_types.py), built once from the (redacted) findings
(and `report merge`'s view from its merged reports): every document format (report/formats/)
renders such a list, and none walks the findings itself. The evidence a report shows comes from
one renderer per evidence kind (report/evidence_sections.py)."""

from __future__ import annotations

from typing import Any

from fieldguide import __version__
from fieldguide.report.charts import charts_for
from fieldguide.report.evidence_sections import APPENDIX, FINDING, START, evidence_sections
from fieldguide.report.findings import (
    EXPERIMENT_COLUMNS,
    Findings,
    PathStep,
    experiment_applied,
    experiment_rows,
)
from fieldguide.report.section_types import (
    Bullets,
    Cell,
    Facts,
    Figure,
    FixPage,
    Heading,
    Paragraph,
    Preformatted,
    Section,
    Span,
    Table,
    Timeline,
    Title,
    Verdict,
    cells,
    code,
)
from fieldguide.report.vocabulary import ACTION_TEXT, status_mark, verdict_text

LOG_LINES = 20  # the target's last output lines shown in a report
NOTE_CHARS = 120  # of a node's note, where a terminal shows it for want of measured values


def _table(columns: tuple[str, ...], rows: list[list[Cell]] | list[tuple[Cell, ...]]) -> Table:
    return Table(columns, tuple(tuple(r) for r in rows))


def _environment_words(env: dict[str, Any]) -> str:
    nvml = env.get("nvml")
    return (f"Python {env.get('python')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
            f"{env.get('cpu_cores')} CPU cores, {len(env.get('gpus') or [])} GPUs"
            + (f" ({nvml})" if nvml and nvml != "ok" else ""))


def _measured(findings: Findings, measured: dict[str, Any]) -> str:
    return ", ".join(f"{n}={v}" for n, v in findings.formatted(measured))


def _steps_rows(f: Findings, steps: list[PathStep], *, reruns: bool = False) -> list[list[Cell]]:
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
            _table(("measured", "value"), [cells(n, v) for n, v in f.formatted(dep["measured"])]),
            Paragraph((Span("Expected: "), code(dep["expected"]))),
            FixPage(str(dep.get("why", "")), tuple(dep["fix"]), str(dep["verify"])),
            *also_departing(f)]


def _share_text(share: object) -> str:
    return f"{share:.0%}" if isinstance(share, (int, float)) and not isinstance(share, bool) else "—"


def also_departing(f: Findings) -> list[Section]:
    """The other departures the walk named, each with its share of the step and where it is spent;
    the first departure, above, has the largest share."""
    if not f.also_departing:
        return []
    dep: dict[str, Any] = dict(f.first_departure or {})
    first = (f"The cause above has the largest share ({_share_text(dep.get('share'))}); "
             if dep.get("share") is not None else "")
    return [Heading(3, "Also departing"),
            Paragraph((Span(first + "these departed too, smaller, each a cause of its own:"),)),
            _table(("cause", "share", "where", "summary"),
                   [[Cell(str(a["cause"]), code=True), Cell(_share_text(a.get("share"))),
                     Cell(str(a.get("at") or ""), code=bool(a.get("at"))), Cell(str(a.get("summary", "")))]
                    for a in f.also_departing])]




def _path_brief(f: Findings, steps: list[PathStep], *, reruns: bool = False) -> Table:
    """The path as a terminal shows it: node, status and what was measured (else the note)."""
    rows = []
    for step in steps:
        measured = _measured(f, step.get("measured") or {}) or str(step.get("note") or "")[:NOTE_CHARS]
        cells = [Cell(str(step["node"])), Cell(status_mark(step["status"]), status=str(step["status"])), Cell(measured)]
        if reruns:
            cells.insert(0, Cell(ACTION_TEXT.get(step["action"], step["action"])))
        rows.append(cells)
    return _table((("did",) if reruns else ()) + ("node", "status", "measured"), rows)


def _departure_brief(f: Findings) -> list[Section]:
    dep = f.first_departure
    if not dep:
        return [Heading(3, f"Healthy: {f.conclusion}"), Paragraph((Span(f.conclusion_text),))] if f.conclusion else []
    return [Heading(3, f"{dep['title']}  [{dep['cause']}]"), Paragraph((Span(str(dep["summary"])),)),
            Paragraph((Span("expected: "), code(dep["expected"]))),
            FixPage("", tuple(dep["fix"]), str(dep["verify"])), *also_departing(f)]


def brief(sections: list[Section], max_rows: int) -> list[Section]:
    """The sections with each table cut to `max_rows` rows, saying how many more the report has."""
    cut: list[Section] = []
    for s in sections:
        if isinstance(s, Table) and len(s.rows) > max_rows:
            cut += [Table(s.columns, s.rows[:max_rows]),
                    Paragraph((Span(f"… {len(s.rows) - max_rows} more in the report"),))]
        else:
            cut.append(s)
    return cut


def summary_sections(findings: Findings, *, max_rows: int = 8) -> list[Section]:
    """The short summary a headless walk prints: the verdict, the path, the departure and its fix,
    what the departed node found (`max_rows` of it), the start where a node timed it, the fixes
    tried, how the job ended; the same sections as the report, fewer of them."""
    f = findings.redacted()
    sections: list[Section] = [Verdict(f.verdict, verdict_text(f.verdict)), _path_brief(f, f.path),
                               *_departure_brief(f)]
    sections += [s for s in evidence_sections(f, START) if isinstance(s, Timeline) and s.node is not None]
    sections += brief(evidence_sections(f, FINDING), max_rows)
    sections += _experiments(f)
    if f.exit:
        sections.append(Paragraph((Span(f.exit_line(), "bold"),), kind="error"))
    if f.note:
        sections.append(Paragraph((Span(f.note),), kind="note"))
    if f.reruns:
        sections += [Heading(3, "Measured again in the TUI:"), _path_brief(f, f.reruns, reruns=True)]
    sections += artifact_sections(f, level=3)
    return sections


def artifact_sections(f: Findings, level: int = 2) -> list[Section]:
    """The files the walk left for the usual viewers: what each is, where, and what opens it."""
    if not f.artifacts:
        return []
    rows = [(Cell(str(a.get("kind", ""))), Cell(str(a["path"]), code=True, link=_link(a)),
             Cell(str(a.get("command") or a.get("open_with") or ""), code=bool(a.get("command"))))
            for a in f.artifacts]
    return [Heading(level, "Files to open"), Table(("kind", "file", "open with"), tuple(rows))]


def _link(artifact: Any) -> str:
    """Relative to the report where the file is beside it (links that survive `scp -r`), else a
    file:// URI."""
    href = artifact.get("href")
    if isinstance(href, str) and href and not href.startswith(("/", "..")) and ":" not in href.split("/")[0]:
        from urllib.parse import quote

        return quote(href)
    return _file_link(str(artifact["path"]))


def _file_link(path: str) -> str:
    from pathlib import Path

    return Path(path).as_uri() if path.startswith("/") else ""


def _experiments(f: Findings) -> list[Section]:
    return experiment_sections(f.experiments)


def experiment_sections(experiments: list[dict[str, Any]]) -> list[Section]:
    """Each fix tried: its title, the table of arms, and its verdict (or why it was not tried)."""
    found: list[Section] = []
    for experiment, (title, arm_rows, said) in zip(experiments, experiment_rows(experiments), strict=True):
        found.append(Heading(3, title))
        if arm_rows:
            # The losses column where the experiment compared them (equivalence before speed).
            keep = [i for i, name in enumerate(EXPERIMENT_COLUMNS)
                    if name != "losses" or any(row[i] for row in arm_rows)]
            found.append(_table(tuple(EXPERIMENT_COLUMNS[i] for i in keep),
                                [cells(*(row[i] for i in keep)) for row in arm_rows]))
            applied = experiment_applied(experiment)
            if applied:
                found += [Paragraph((Span("Where each change was applied:"),)), Bullets(tuple(applied))]
        found.append(Paragraph((Span(said),)))
    return found






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
        *_departure(f), *evidence_sections(f, FINDING)]
    sections += _experiments(f)
    if f.exit:
        sections.append(Paragraph((Span(f.exit_line(), "bold"),), kind="error"))
    if f.note:
        sections.append(Paragraph((Span(f.note),), kind="note"))
    sections += evidence_sections(f, START)
    charts = charts_for(f)
    if charts:
        sections += [Heading(2, "Charts"), *(Figure(caption, svg) for caption, svg in charts)]
    sections += [Heading(2, "Path"),
                 _table(("node", "status", "measured", "expected", "probe", "s", "note"), _steps_rows(f, f.path))]
    if f.reruns:
        sections += [Heading(2, "Measured again in the TUI"),
                     _table(("when", "did", "node", "status", "measured", "expected", "s", "note"),
                            _steps_rows(f, f.reruns, reruns=True))]
    sections += artifact_sections(f)
    sections += evidence_sections(f, APPENDIX)
    if f.log_tail:
        sections += [Heading(2, "Target output (last lines)"),
                     Preformatted(tuple(str(line) for line in f.log_tail[-LOG_LINES:]))]
    return sections
