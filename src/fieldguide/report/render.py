"""Render Findings as JSON, Markdown or HTML; all three read the same object."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from fieldguide.measurement import format_value
from fieldguide.report.findings import Findings

FORMATS = ("json", "md", "html")
STATUS_MARK = {"pass": "✓ pass", "depart": "✗ depart", "skip": "– skip", "error": "! error"}
VERDICT_TEXT = {"departure": "Departure found", "clean": "Clean: the walk reached a healthy leaf",
                "inconclusive": "Inconclusive: the walk could not measure what it needed"}


# Report formats by file suffix.
SUFFIXES = {".json": "json", ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # never leave a half-written report behind
    return path


def _measured_rows(findings: Findings, measured: dict[str, Any]) -> list[tuple[str, str]]:
    return [(name, format_value(value, findings.units.get(name, ""))) for name, value in measured.items()]


def to_markdown(findings: Findings) -> str:
    data = findings.to_json()  # redacted
    lines = [f"# fieldguide report: {findings.playbook_title}", ""]
    target = data["target"]
    cmd = " ".join(target.get("cmdline") or [])
    lines.append(f"- **Target**: {target.get('kind')} pid {target.get('pid')}" + (f" — `{cmd}`" if cmd else ""))
    env = data["environment"]
    lines.append(f"- **Environment**: Python {env.get('python')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, "
                 f"{env.get('cpu_cores')} CPU cores, {len(env.get('gpus') or [])} GPUs"
                 + (f" ({env.get('nvml')})" if env.get("nvml") and env.get("nvml") != "ok" else ""))
    lines.append(f"- **Created**: {data['created']} by fieldguide {data['fieldguide_version']}")
    lines += ["", f"## Verdict: {VERDICT_TEXT[data['verdict']]}", ""]
    dep = data["first_departure"]
    if dep:
        lines += [f"### {dep['title']}", "", f"Cause `{dep['cause']}` at node `{dep['node']}`.", "", dep["summary"], "",
                  "| measured | value |", "|---|---|"]
        lines += [f"| {n} | {v} |" for n, v in _measured_rows(findings, dep["measured"])]
        lines += ["", f"Expected: `{dep['expected']}`", "", "**Why it matters.** " + dep["why"], "", "**Fix**", ""]
        for step in dep["fix"]:
            body = step.strip().splitlines()
            lines.append(f"1. {body[0]}")
            lines += [f"   {ln}" if ln.strip() else "" for ln in body[1:]]
        lines += ["", "**Verify.** " + dep["verify"], ""]
    elif data["conclusion"]:
        lines += [f"Healthy leaf `{data['conclusion']}`: {data.get('conclusion_text', '')}", ""]
    if data.get("note"):
        lines += [f"> {data['note']}", ""]
    lines += ["## Path", "", "| node | status | measured | expected | probe | s | note |", "|---|---|---|---|---|---|---|"]
    for step in data["path"]:
        measured = ", ".join(f"{n}={v}" for n, v in _measured_rows(findings, step["measured"]))
        note = step["note"].replace("|", "\\|")
        lines.append(f"| {step['node']} | {STATUS_MARK[step['status']]} | {measured} | `{step['expected']}` | "
                     f"{step['probe'] or ''} | {step['seconds']:.1f} | {note} |")
    stacks = _top_stacks(data)
    if stacks:
        lines += ["", "## Top stacks (main thread)", "", "| share | where | stack (innermost first) |", "|---|---|---|"]
        lines += [f"| {s['share']:.0%} | {s['category']} | `{s['stack']}` |" for s in stacks]
    if data.get("log_tail"):
        lines += ["", "## Target output (last lines)", "", "```", *data["log_tail"][-20:], "```"]
    return "\n".join(lines) + "\n"


def _top_stacks(data: dict[str, Any]) -> list[dict[str, Any]]:
    for ev in data.get("evidence", {}).values():
        if ev.get("top_stacks"):
            return list(ev["top_stacks"])
    return []


def _md_inline(text: str) -> str:
    """Escape, then render `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _md_block(text: str) -> str:
    """A fix step: paragraphs and ``` code fences."""
    out: list[str] = []
    code: list[str] = []
    in_code = False
    for line in text.strip().splitlines():
        if line.strip().startswith("```"):
            if in_code:
                out.append("<pre><code>" + html.escape("\n".join(code)) + "</code></pre>")
                code = []
            in_code = not in_code
            continue
        (code if in_code else out).append(line if in_code else _md_inline(line))
    if code:
        out.append("<pre><code>" + html.escape("\n".join(code)) + "</code></pre>")
    return "\n".join(out)


CSS = """body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}
code,pre{font-family:ui-monospace,monospace;background:#f4f4f4}pre{padding:8px;overflow-x:auto}
.pass{color:#1a7f37}.depart{color:#cf222e;font-weight:bold}.skip{color:#777}.error{color:#9a6700}
.verdict{padding:8px 12px;border-left:4px solid #cf222e;background:#fff5f5}.clean{border-color:#1a7f37;background:#f3fff5}"""


def to_html(findings: Findings) -> str:
    data = findings.to_json()
    e = html.escape
    target, env, dep = data["target"], data["environment"], data["first_departure"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>fieldguide: {e(findings.playbook_title)}</title>"
             f"<style>{CSS}</style></head><body>", f"<h1>fieldguide report: {e(findings.playbook_title)}</h1>",
             "<ul>",
             f"<li><b>Target</b>: {e(str(target.get('kind')))} pid {e(str(target.get('pid')))} "
             f"<code>{e(' '.join(target.get('cmdline') or []))}</code></li>",
             f"<li><b>Environment</b>: Python {e(str(env.get('python')))}, torch {e(str(env.get('torch')))}, "
             f"CUDA {e(str(env.get('cuda')))}, {e(str(env.get('cpu_cores')))} CPU cores, "
             f"{len(env.get('gpus') or [])} GPUs</li>",
             f"<li><b>Created</b>: {e(data['created'])} by fieldguide {e(data['fieldguide_version'])}</li></ul>",
             f"<div class='verdict {e(data['verdict'])}'><b>{e(VERDICT_TEXT[data['verdict']])}</b></div>"]
    if dep:
        parts += [f"<h2>{e(dep['title'])}</h2>", f"<p>Cause <code>{e(dep['cause'])}</code> at node "
                  f"<code>{e(dep['node'])}</code>.</p>", f"<p>{e(dep['summary'])}</p>",
                  "<table><tr><th>measured</th><th>value</th></tr>"]
        parts += [f"<tr><td>{e(n)}</td><td>{e(v)}</td></tr>" for n, v in _measured_rows(findings, dep["measured"])]
        parts += ["</table>", f"<p>Expected: <code>{e(dep['expected'])}</code></p>",
                  f"<h3>Why it matters</h3><p>{e(dep['why'])}</p>", "<h3>Fix</h3><ol>"]
        parts += [f"<li>{_md_block(step)}</li>" for step in dep["fix"]]
        parts += ["</ol>", f"<h3>Verify</h3><p>{_md_inline(dep['verify'])}</p>"]
    elif data["conclusion"]:
        parts.append(f"<p>Healthy leaf <code>{e(data['conclusion'])}</code>: {e(data.get('conclusion_text', ''))}</p>")
    if data.get("note"):
        parts.append(f"<blockquote>{e(data['note'])}</blockquote>")
    parts.append("<h2>Path</h2><table><tr><th>node</th><th>status</th><th>measured</th><th>expected</th>"
                 "<th>probe</th><th>s</th><th>note</th></tr>")
    for step in data["path"]:
        measured = ", ".join(f"{n}={v}" for n, v in _measured_rows(findings, step["measured"]))
        parts.append(f"<tr><td>{e(step['node'])}</td><td class='{e(step['status'])}'>{e(STATUS_MARK[step['status']])}</td>"
                     f"<td>{e(measured)}</td><td><code>{e(step['expected'])}</code></td><td>{e(step['probe'] or '')}</td>"
                     f"<td>{step['seconds']:.1f}</td><td>{e(step['note'])}</td></tr>")
    parts.append("</table>")
    stacks = _top_stacks(data)
    if stacks:
        parts.append("<h2>Top stacks (main thread)</h2><table><tr><th>share</th><th>where</th><th>stack</th></tr>")
        parts += [f"<tr><td>{s['share']:.0%}</td><td>{e(s['category'])}</td><td><code>{e(s['stack'])}</code></td></tr>"
                  for s in stacks]
        parts.append("</table>")
    if data.get("log_tail"):
        parts.append("<h2>Target output (last lines)</h2><pre>" + e("\n".join(data["log_tail"][-20:])) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
