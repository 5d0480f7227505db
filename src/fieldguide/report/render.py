"""Render Findings as JSON, Markdown or HTML; all three read the same (redacted) object, with
the one status vocabulary (report/vocabulary.py) and the one fix-step renderer (report/fixsteps.py)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from fieldguide import __version__
from fieldguide.coldstart import SHARE_TITLES
from fieldguide.measurement import format_value
from fieldguide.report.charts import charts_for
from fieldguide.report.findings import Findings
from fieldguide.report.fixsteps import inline_html, page_html, page_markdown
from fieldguide.report.mdtext import md_cell, md_code, md_fence, md_text
from fieldguide.report.summary import EXPERIMENT_COLUMNS
from fieldguide.report.timeline import cold_start_of, timed_phases, timeline_title
from fieldguide.report.vocabulary import ACTION_TEXT, status_mark, verdict_text
from fieldguide.safewrite import write_text

FORMATS = ("json", "md", "html")

# Report formats by file suffix.
SUFFIXES = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}
LOG_LINES = 20  # the target's last output lines shown in a report


def format_for(path: Path, explicit: str | None) -> str:
    if explicit:
        return explicit
    return SUFFIXES.get(path.suffix.lower(), "json")


def render(findings: Findings, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(findings.to_json(), indent=2, default=str) + "\n"
    if fmt == "md":
        return to_markdown(findings)
    if fmt == "html":
        return to_html(findings)
    raise ValueError(f"unknown report format {fmt!r}; use one of {', '.join(FORMATS)}")


def write_report(findings: Findings, path: Path, fmt: str | None = None) -> Path:
    path = Path(path)
    text = render(findings, format_for(path, fmt))
    return write_text(path, text)  # never half a report, never through a planted link


def redacted(findings: Findings) -> Findings:
    """The findings as the report shows them: every secret-looking string redacted."""
    return findings.redacted()


def _measured(findings: Findings, measured: dict[str, Any]) -> str:
    return ", ".join(f"{n}={v}" for n, v in findings.formatted(measured))


def _environment_words(env: dict[str, Any]) -> str:
    nvml = env.get("nvml")
    return (f"Python {env.get('python')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
            f"{env.get('cpu_cores')} CPU cores, {len(env.get('gpus') or [])} GPUs"
            + (f" ({nvml})" if nvml and nvml != "ok" else ""))


# -- Markdown ------------------------------------------------------------------------------------------
# Every string a report holds (the job's command line, output, frames, exception, and whatever a
# saved report file says) goes through report/mdtext.py: shown as it is, never as markup.

def _share(seconds: float, total: object) -> str:
    return f"{seconds / total:.0%}" if isinstance(total, (int, float)) and total > 0 else ""


def _row_md(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def cold_start_markdown(findings: Findings) -> list[str]:
    """## Cold start: the time to steady steps, the timeline's phases and where the time went (the
    disjoint shares, largest first); what a node of the walk measured, else the walk's own."""
    cold, _ = cold_start_of(findings, [str(step["node"]) for step in findings.path])
    if cold is None:
        return []
    total = cold.get("total_s")
    lines = ["## Cold start", "", md_text(timeline_title(cold).removeprefix("Cold start: ") + "."), "",
             "| phase | from s | seconds | share |", "|---|---|---|---|"]
    lines += [_row_md(md_cell(title), f"{start:.3g}", f"{seconds:.3g}", _share(seconds, total))
              for _, title, start, seconds in timed_phases(cold.get("phases"))]
    shares = cold.get("shares")
    found = sorted(((str(n), float(v)) for n, v in (shares.items() if isinstance(shares, dict) else [])
                    if isinstance(v, (int, float)) and not isinstance(v, bool)), key=lambda item: -item[1])
    if found:
        lines += ["", "| where the time went | seconds | share |", "|---|---|---|"]
        lines += [_row_md(md_cell(SHARE_TITLES.get(name, name)), f"{seconds:.3g}", _share(seconds, total))
                  for name, seconds in found]
    return [*lines, ""]


def _steps_markdown(f: Findings, steps: list[dict[str, Any]], *, reruns: bool = False) -> list[str]:
    """The path's (or the re-runs') table rows."""
    rows = []
    for step in steps:
        cells = [md_cell(step["node"]), md_cell(status_mark(step["status"])),
                 md_cell(_measured(f, step.get("measured") or {})), md_code(step.get("expected", ""), cell=True)]
        if reruns:
            action = ACTION_TEXT.get(step["action"], step["action"])
            cells = [md_cell(step.get("when", "")), md_cell(action), *cells]
        else:
            cells.append(md_cell(step.get("probe") or ""))
        cells += [f"{float(step.get('seconds') or 0):.1f}", md_cell(step.get("note", ""))]
        rows.append(_row_md(*cells))
    return rows


def to_markdown(findings: Findings) -> str:
    f = redacted(findings)
    lines = [f"# fieldguide report: {md_text(f.playbook_title)}", ""]
    cmd = " ".join(str(a) for a in f.target.get("cmdline") or [])
    lines.append(f"- **Target**: {md_text(f.target.get('kind'))} pid {md_text(f.target.get('pid'))}"
                 + (f" — {md_code(cmd)}" if cmd else ""))
    lines.append(f"- **Environment**: {md_text(_environment_words(f.environment))}")
    lines.append(f"- **Created**: {md_text(f.created)} by fieldguide {__version__}")
    lines += ["", f"## Verdict: {verdict_text(f.verdict)}", ""]
    dep = f.first_departure
    if dep:
        lines += [f"### {md_text(dep['title'])}", "", f"Cause {md_code(dep['cause'])} at node {md_code(dep['node'])}.",
                  "", md_text(dep["summary"]), "", "| measured | value |", "|---|---|"]
        lines += [_row_md(md_cell(n), md_cell(v)) for n, v in f.formatted(dep["measured"])]
        lines += ["", f"Expected: {md_code(dep['expected'])}", ""]
        lines += page_markdown(dep.get("why", ""), dep["fix"], dep["verify"], level=3).splitlines()
        lines.append("")
    elif f.conclusion:
        lines += [f"Healthy leaf {md_code(f.conclusion)}: {md_text(f.conclusion_text)}", ""]
    rows = f.found_rows()
    if rows:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        lines += [f"### What {md_text(dep['node']) if dep else 'the node'} found", "", _row_md(*map(md_cell, columns)),
                  "|" + "---|" * len(columns)]
        lines += [_row_md(*(md_cell(format_value(r.get(c))) for c in columns)) for r in rows]
        lines.append("")
    trace = f.torch_trace()
    if trace:
        lines += [f"Compile trace (TORCH_TRACE) in {md_code(trace)}: open it with "
                  f"{md_code(f'pip install tlparse; tlparse {trace}')}.", ""]
    for title, arm_rows, said in f.experiment_rows():
        lines += [f"### {md_text(title)}", ""]
        if arm_rows:
            lines += [_row_md(*EXPERIMENT_COLUMNS), "|" + "---|" * len(EXPERIMENT_COLUMNS)]
            lines += [_row_md(*map(md_cell, row)) for row in arm_rows]
            lines.append("")
        lines += [md_text(said), ""]
    if f.exit:
        lines += [f"**{md_text(f.exit_line())}**", ""]
    if f.note:
        lines += [f"> {md_text(f.note)}", ""]
    lines += cold_start_markdown(f)
    lines += ["## Path", "", "| node | status | measured | expected | probe | s | note |", "|---|---|---|---|---|---|---|"]
    lines += _steps_markdown(f, f.path)
    if f.reruns:
        lines += ["", "## Measured again in the TUI", "",
                  "| when | did | node | status | measured | expected | s | note |", "|---|---|---|---|---|---|---|---|"]
        lines += _steps_markdown(f, f.reruns, reruns=True)
    whose, stacks = f.top_stacks()
    if stacks:
        lines += ["", f"## Top stacks ({whose})", "", "| share | where | stack (innermost first) |", "|---|---|---|"]
        lines += [_row_md(_percent(s.get("share")), md_cell(s.get("category", "")), md_code(s.get("stack", ""), cell=True))
                  for s in stacks]
    if f.log_tail:
        lines += ["", "## Target output (last lines)", "", *md_fence([str(line) for line in f.log_tail[-LOG_LINES:]])]
    return "\n".join(lines) + "\n"


def _percent(share: object) -> str:
    return f"{share:.0%}" if isinstance(share, (int, float)) else md_cell(share)


# -- HTML ----------------------------------------------------------------------------------------------

CSS = """body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
code,pre{font-family:ui-monospace,monospace;background:#f4f4f4}pre{padding:8px;overflow-x:auto}
.pass{color:#1a7f37}.depart{color:#cf222e;font-weight:bold}.skip{color:#777}.error{color:#9a6700}
.verdict{padding:8px 12px;border-left:4px solid #cf222e;background:#fff5f5}.clean{border-color:#1a7f37;background:#f3fff5}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#57606a;font-size:90%}"""


def _row(*cells: str) -> str:
    return "<tr>" + "".join(cells) + "</tr>"


def _td(text: str, cls: str = "") -> str:
    return f"<td class='{html.escape(cls)}'>{text}</td>" if cls else f"<td>{text}</td>"


def to_html(findings: Findings) -> str:
    f = redacted(findings)
    e = html.escape
    target, env, dep = f.target, f.environment, f.first_departure
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fieldguide: {e(f.playbook_title)}</title>"
             f"<style>{CSS}</style></head><body>", f"<h1>fieldguide report: {e(f.playbook_title)}</h1>",
             "<ul>",
             f"<li><b>Target</b>: {e(str(target.get('kind')))} pid {e(str(target.get('pid')))} "
             f"<code>{e(' '.join(target.get('cmdline') or []))}</code></li>",
             f"<li><b>Environment</b>: {e(_environment_words(env))}</li>",
             f"<li><b>Created</b>: {e(f.created)} by fieldguide {e(__version__)}</li></ul>",
             f"<div class='verdict {e(f.verdict)}'><b>{e(verdict_text(f.verdict))}</b></div>"]
    if dep:
        parts += [f"<h2>{e(dep['title'])}</h2>", f"<p>Cause <code>{e(dep['cause'])}</code> at node "
                  f"<code>{e(dep['node'])}</code>.</p>", f"<p>{e(dep['summary'])}</p>",
                  "<table><tr><th>measured</th><th>value</th></tr>"]
        parts += [_row(_td(e(n)), _td(e(v))) for n, v in f.formatted(dep["measured"])]
        parts += ["</table>", f"<p>Expected: <code>{e(dep['expected'])}</code></p>",
                  page_html(dep.get("why", ""), dep["fix"], dep["verify"])]
    elif f.conclusion:
        parts.append(f"<p>Healthy leaf <code>{e(f.conclusion)}</code>: {e(f.conclusion_text)}</p>")
    rows = f.found_rows()
    if rows:
        columns = list(dict.fromkeys(k for r in rows for k in r))
        parts.append("<h3>What was found</h3><table><tr>" + "".join(f"<th>{e(c)}</th>" for c in columns) + "</tr>")
        parts += [_row(*(_td(e(format_value(r.get(c)))) for c in columns)) for r in rows]
        parts.append("</table>")
    if f.torch_trace():
        parts.append(f"<p>Compile trace (TORCH_TRACE) in <code>{e(str(f.torch_trace()))}</code>: open it with "
                     f"<code>pip install tlparse; tlparse {e(str(f.torch_trace()))}</code>.</p>")
    for title, arm_rows, said in f.experiment_rows():
        parts.append(f"<h3>{e(title)}</h3>")
        if arm_rows:
            parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in EXPERIMENT_COLUMNS) + "</tr>")
            parts += [_row(*(_td(e(c)) for c in row)) for row in arm_rows]
            parts.append("</table>")
        parts.append(f"<p>{e(said)}</p>")
    if f.exit:
        parts.append(f"<p class='error'><b>{e(f.exit_line())}</b></p>")
    if f.note:
        parts.append(f"<blockquote>{e(f.note)}</blockquote>")
    charts = charts_for(f)
    if charts:  # inline SVG (report/charts.py): no script, nothing fetched
        parts.append("<h2>Charts</h2>")
        parts += [f"<figure>{svg}<figcaption>{e(caption)}</figcaption></figure>" for caption, svg in charts]
    parts.append("<h2>Path</h2><table><tr><th>node</th><th>status</th><th>measured</th><th>expected</th>"
                 "<th>probe</th><th>s</th><th>note</th></tr>")
    for step in f.path:
        parts.append(_row(_td(e(step["node"])), _td(e(status_mark(step["status"])), step["status"]),
                          _td(e(_measured(f, step["measured"]))), _td(f"<code>{e(step['expected'])}</code>"),
                          _td(e(step["probe"] or "")), _td(f"{step['seconds']:.1f}"), _td(e(step["note"]))))
    parts.append("</table>")
    if f.reruns:
        parts.append("<h2>Measured again in the TUI</h2><table><tr><th>when</th><th>did</th><th>node</th>"
                     "<th>status</th><th>measured</th><th>expected</th><th>s</th><th>note</th></tr>")
        for run in f.reruns:
            parts.append(_row(_td(e(str(run.get("when", "")))), _td(e(ACTION_TEXT.get(run["action"], run["action"]))),
                              _td(e(run["node"])), _td(e(status_mark(run["status"])), run["status"]),
                              _td(e(_measured(f, run.get("measured") or {}))),
                              _td(f"<code>{e(str(run.get('expected', '')))}</code>"),
                              _td(f"{float(run.get('seconds') or 0):.1f}"), _td(e(str(run.get("note", ""))))))
        parts.append("</table>")
    whose, stacks = f.top_stacks()
    if stacks:
        parts.append(f"<h2>Top stacks ({e(whose)})</h2><table><tr><th>share</th><th>where</th><th>stack</th></tr>")
        parts += [_row(_td(f"{s['share']:.0%}"), _td(e(s["category"])), _td(f"<code>{e(s['stack'])}</code>"))
                  for s in stacks]
        parts.append("</table>")
    if f.log_tail:
        parts.append("<h2>Target output (last lines)</h2><pre>" + e("\n".join(f.log_tail[-LOG_LINES:])) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


__all__ = ["FORMATS", "SUFFIXES", "format_for", "inline_html", "redacted", "render", "to_html", "to_markdown",
           "write_report"]
