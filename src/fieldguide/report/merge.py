"""`fieldguide report merge`: the reports of a job's nodes (one fieldguide per node, each seeing
its own ranks) as one view: every node and every rank side by side, the rank whose own work sets
the pace across the whole job, and one verdict naming each cause with where it was found.

A rank's step splits into its own work and its wait in collectives (fieldguide/analysis/ranks.py): a
node whose ranks all wait may be waiting for a rank on another node, which only the merged view
sees. Pure apart from reading the reports and writing the result.
"""

from __future__ import annotations

import itertools
import json
import socket
import statistics
from pathlib import Path
from typing import Any

from fieldguide import __version__
from fieldguide.analysis.ranks import pace
from fieldguide.errors import FieldguideError
from fieldguide.report.findings import SCHEMA_VERSION, Findings, load_report, utc_now
from fieldguide.report.formats import format_module
from fieldguide.report.section_types import (
    Bullets,
    Cell,
    Heading,
    Paragraph,
    Section,
    Span,
    Table,
    Title,
)
from fieldguide.safewrite import write_text

STRAGGLER = "dist.straggler"
SLOW_NODE = "dist.slow_node"
# The node whose expectation judges the ranks of the whole job, as it judges one node's.
PACE_NODE = ("slow-training", "dist.ranks")
COLUMNS = ("host", "node rank", "rank", "pid", "verdict", "cause", "step ms", "own ms", "data wait", "collective wait")


def expand_report_path(path: Path, host: str | None = None) -> Path:
    """`%h` in a report path becomes this machine's host name (`%%` a literal `%`), so that one
    command line run on every node (`srun ... --report reports/report-%h.json`) writes one report each."""
    name = (host or socket.gethostname() or "localhost").replace("/", "_")
    text = str(path)
    if "%" not in text:
        return path
    return Path("%".join(part.replace("%h", name) for part in text.split("%%")))


def merge_command(paths: list[Path], fmt: str, output: Path | None) -> int:
    """Read the reports, merge them and print (or write to `output`) the merged view."""
    if len(paths) < 2:
        raise FieldguideError(f"report merge needs two or more JSON reports, one per node ({len(paths)} given)")
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:
            raise FieldguideError(f"report merge: {path} is given twice")
        seen.add(path.resolve())
    reports = [(str(path), load(path)) for path in paths]
    check_together(reports)
    merged = merge(reports)
    text = render_merged(merged, fmt)
    if output is None:
        print(text, end="")
        return 0
    try:
        write_text(output, text)  # never half a view, never through a planted link
    except OSError as err:
        raise FieldguideError(f"cannot write {output}: {err.strerror or err}") from None
    return 0


def _rank_numbers(f: Findings) -> set[int]:
    return {int(r["rank"]) for r in f.ranks if isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool)}


# The largest world size a report may claim: torchrun and Slurm jobs run to tens of thousands of
# ranks; a report claiming more is not one (a crafted 10**12 once built a range of that size).
MAX_WORLD_SIZE = 1 << 20


def check_together(reports: list[tuple[str, Findings]]) -> None:
    """FieldguideError (one line, exit 2) for reports that are not the nodes of one job's walk:
    different playbooks, different jobs (run id or rendezvous), one node's ranks in two reports, or
    fewer ranks than the job's world size says (a node's report missing)."""
    (first, f0), *rest = reports
    for path, f in rest:
        if f.playbook != f0.playbook:
            raise FieldguideError(f"report merge: {first} is a {f0.playbook} report and {path} a {f.playbook} one: "
                                  "merge the reports of one playbook's walks of one job")
    jobs: list[tuple[str, dict[str, Any]]] = [(path, dict(f.job)) for path, f in reports if f.job]
    for key, what in (("id", "run id"), ("master", "rendezvous")):
        told = [(path, job[key]) for path, job in jobs if job.get(key)]
        if len({value for _, value in told}) > 1:
            a, va = told[0]
            b, vb = next((path, value) for path, value in told if value != va)
            raise FieldguideError(f"report merge: {a} and {b} are of different jobs ({what} {va} and {vb})")
    walks: dict[tuple[str, str, str], str] = {}  # one walk is one report: a copy of it is no other node
    for path, f in reports:
        pid = f.target.get("pid") if isinstance(f.target, dict) else None
        host = (f.environment or {}).get("host") if isinstance(f.environment, dict) else None
        walk = (str(host), str(pid), f.created)
        if f.created and host and pid is not None and walk in walks:
            raise FieldguideError(f"report merge: {walks[walk]} and {path} are the same walk (pid {pid} on {host}, "
                                  f"{f.created}): give each node's report once")
        walks[walk] = path
    owner: dict[int, str] = {}
    for path, f in reports:
        for number in sorted(_rank_numbers(f)):
            if number in owner:
                raise FieldguideError(f"report merge: {owner[number]} and {path} both hold rank {number}: "
                                      "the same node twice, or reports of two runs")
            owner[number] = path
    worlds = {job["world_size"] for _, job in jobs
              if isinstance(job.get("world_size"), int) and not isinstance(job.get("world_size"), bool)}
    too_large = [(path, job["world_size"]) for path, job in jobs if job.get("world_size") in worlds
                 and not 0 < job["world_size"] <= MAX_WORLD_SIZE]
    if too_large:
        path, size = too_large[0]
        raise FieldguideError(f"report merge: {path} says the job has {size} ranks: not a world size "
                              f"(1 to {MAX_WORLD_SIZE})")
    strays = [(owner[n], n) for n in owner if not 0 <= n < max(worlds or {MAX_WORLD_SIZE})]
    if strays:
        path, number = strays[0]
        raise FieldguideError(f"report merge: {path} holds rank {number}, outside the job's "
                              f"{max(worlds or {MAX_WORLD_SIZE})} ranks")
    if worlds and owner and len(owner) < max(worlds):
        # The first few missing, counted without making the range (a world of a million ranks).
        missing = list(itertools.islice((n for n in range(max(worlds)) if n not in owner), 9))
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise FieldguideError(f"report merge: the job has {max(worlds)} ranks and these reports hold {len(owner)}: "
                              f"ranks {shown} are missing (add the reports of their nodes)")


def load(path: Path) -> Findings:
    """One node's report; FieldguideError in one line for anything that is not one."""
    return load_report(path)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _measured(f: Findings, name: str) -> float | None:
    """A value the walk measured (the first node that has it), e.g. loop.steps' step_ms_median."""
    for step in f.path:
        found = _number((step.get("measured") or {}).get(name))
        if found is not None:
            return found
    return None


def _host(f: Findings, path: str) -> str:
    for where in (f.target, f.environment):
        if isinstance(where, dict) and where.get("host"):
            return str(where["host"])
    hosts = {str(r["host"]) for r in f.ranks if r.get("host")}
    return hosts.pop() if len(hosts) == 1 else Path(path).stem


def _named_rank(f: Findings) -> float | None:
    """The rank a dist.straggler departure names: in its measured values, else in the departed
    node's evidence (dist.ranks' values), else the rank whose verdict says it is the slowest."""
    dep = f.first_departure
    evidence = f.evidence.get(dep["node"], {}) if dep and isinstance(f.evidence, dict) else {}
    for values in (dep["measured"] if dep else None, evidence.get("values") if isinstance(evidence, dict) else None):
        if isinstance(values, dict) and _number(values.get("slowest_rank")) is not None:
            return _number(values["slowest_rank"])
    slowest = [r for r in f.ranks if str(r.get("verdict", "")).startswith("slowest own work")]
    return _number(slowest[0].get("rank")) if len(slowest) == 1 else None


def _rank_rows(path: str, f: Findings, host: str) -> list[dict[str, Any]]:
    cause = f.first_departure["cause"] if f.first_departure else None
    named = _named_rank(f) if cause == STRAGGLER else None
    if not f.ranks:  # one process: the report itself is its one rank
        rank = (f.environment.get("variables") or {}).get("RANK") if isinstance(f.environment, dict) else None
        return [{"report": path, "host": host, "rank": int(str(rank)) if str(rank).isdigit() else None,
                 "pid": f.target.get("pid"), "step_ms": _measured(f, "step_ms_median"), "own_ms": None,
                 "data_wait": _measured(f, "data_wait_fraction"), "collective_wait": None,
                 "verdict": f.verdict, "cause": cause or "", "conclusion": f.conclusion}]
    rows = []
    for r in f.ranks:
        step, wait = _number(r.get("step_ms")), _number(r.get("collective_wait"))
        own = _number(r.get("own_ms"))
        if own is None and step is not None and wait is not None:
            own = step * (1.0 - wait)
        # A straggler departure belongs to the rank it names; any other cause to every rank.
        mine = r.get("cause") or ("" if cause == STRAGGLER and named != _number(r.get("rank")) else cause or "")
        rows.append({"report": path, "host": str(r.get("host") or host), "rank": r.get("rank"),
                     "node_rank": r.get("node_rank"), "pid": r.get("pid"),
                     "step_ms": step, "own_ms": own, "data_wait": _number(r.get("data_wait")), "collective_wait": wait,
                     "verdict": str(r.get("verdict") or f.verdict), "cause": mine, "conclusion": f.conclusion})
    return rows


def _straggler(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank whose own work is the longest across the job: by own ms where every rank has step
    times, else by its share of time not waiting; a straggler if a report names it, or if the
    playbook's dist.ranks node departs on the job's ranks taken together."""
    named = [r for r in ranks if r["cause"] == STRAGGLER]
    timed = [r for r in ranks if r["own_ms"] is not None]
    # By own ms among the ranks with step times where two have them, else by shares of time.
    measured = timed if len(timed) >= 2 else [r for r in ranks if r["collective_wait"] is not None]
    found_pace = pace([r["own_ms"] for r in measured],
                      [0.0 if r["collective_wait"] is None else r["collective_wait"] for r in measured])
    ratio = others_wait = None
    slowest = None
    found = False
    if found_pace is not None:
        slowest = measured[found_pace.slowest]
        judged = found_pace.judged()
        ratio, others_wait = judged["own_work_ratio"], judged["others_wait_fraction"]
        found = ratio is not None and not _pace_holds(judged)
    chosen = slowest if found or not named else named[0]
    if chosen is None or not (found or named):
        return None
    return {"host": chosen["host"], "rank": chosen["rank"], "report": chosen["report"], "own_ms": chosen["own_ms"],
            "own_work_ratio": ratio if chosen is slowest else None, "others_wait_fraction": others_wait,
            "named_by": sorted({r["report"] for r in named if r["host"] == chosen["host"] and r["rank"] == chosen["rank"]}),
            "found_by_merge": found and chosen is slowest and not chosen["cause"]}


def _node_key(row: dict[str, Any]) -> tuple[str, str]:
    """Which node a rank ran on: its node rank with its host (several "nodes" may share one host),
    else the report it came from (one fieldguide walks one node)."""
    if row.get("node_rank") is not None:
        return (f"node {row['node_rank']}", row["host"])
    return (row["host"], row["report"])


def _known(values: list[float | None]) -> list[float] | None:
    """The values, where every one is known; None where any is missing."""
    known = [v for v in values if v is not None]
    return known if known and len(known) == len(values) else None


def _slow_node(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The node whose ranks' own work sets the job's pace, by the same rule as a straggler rank
    (the playbook's dist.ranks expectation) applied to the nodes: each node's least own work (its
    fastest rank's) against the other nodes' median, while their ranks wait (each node's median
    wait). None with one node, or none slower."""
    nodes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in ranks:
        if row["collective_wait"] is not None:
            nodes.setdefault(_node_key(row), []).append(row)
    if len(nodes) < 2:
        return None
    keys = list(nodes)
    # A node is slow as a whole when even its fastest rank does more of its own work than the other
    # nodes' ranks: one straggling rank among waiting ones is a straggler, not a slow node.
    owns = [_known([r["own_ms"] for r in nodes[k]]) for k in keys]
    waits = [_known([r["collective_wait"] for r in nodes[k]]) for k in keys]
    found = pace([min(o) if o else None for o in owns], [statistics.median(w) if w else None for w in waits])
    if found is None or found.own_work_ratio is None:
        return None
    values = found.judged()
    if _pace_holds(values):
        return None
    slow = nodes[keys[found.slowest]]
    return {"node": keys[found.slowest][0], "host": slow[0]["host"], "node_rank": slow[0].get("node_rank"),
            "ranks": [r["rank"] for r in slow], "reports": sorted({r["report"] for r in slow}), **values}


def _pace_holds(values: dict[str, Any]) -> bool:
    """The slow-training playbook's dist.ranks expectation on the job's ranks (no copy of its bounds)."""
    from fieldguide.playbook import find_playbook

    playbook_id, node = PACE_NODE
    return bool(find_playbook(playbook_id).nodes[node].measure[0].expect.holds(values))


def merge(reports: list[tuple[str, Findings]]) -> dict[str, Any]:
    """The merged view of (path, findings) pairs, as the JSON object `report merge` writes."""
    nodes: list[dict[str, Any]] = []
    ranks: list[dict[str, Any]] = []
    causes: dict[str, dict[str, Any]] = {}
    for path, f in reports:
        host = _host(f, path)
        rows = _rank_rows(path, f, host)
        ranks += rows
        steps = [r["step_ms"] for r in rows if r["step_ms"] is not None]
        cause = f.first_departure["cause"] if f.first_departure else None
        node_ranks = {r["node_rank"] for r in rows if r.get("node_rank") is not None}
        nodes.append({"report": path, "host": host, "node_rank": node_ranks.pop() if len(node_ranks) == 1 else None,
                      "playbook": f.playbook, "verdict": f.verdict,
                      "cause": cause, "conclusion": f.conclusion, "ranks": len(rows), "created": f.created,
                      "step_ms": round(statistics.median(steps), 3) if steps else None})
        if cause:
            entry = causes.setdefault(cause, {"cause": cause, "title": f.first_departure.get("title", "")
                                              if f.first_departure else "", "reports": [], "hosts": [], "ranks": []})
            entry["reports"].append(path)
            entry["hosts"] = sorted({*entry["hosts"], host})
            entry["ranks"] += [{"host": r["host"], "rank": r["rank"]} for r in rows if r["cause"] == cause]
    slow_node = _slow_node(ranks)
    if slow_node:  # first in the merged verdict: the node, with its ranks
        causes = {SLOW_NODE: {"cause": SLOW_NODE, "title": "One node's ranks set the job's pace",
                              "reports": slow_node["reports"], "hosts": [slow_node["host"]],
                              "ranks": [{"host": slow_node["host"], "rank": r} for r in slow_node["ranks"]]},
                  **causes}
    straggler = _straggler(ranks)
    if straggler and straggler["found_by_merge"]:
        causes.setdefault(STRAGGLER, {"cause": STRAGGLER, "title": "One rank's own work sets the job's pace",
                                      "reports": [], "hosts": [], "ranks": []})
        causes[STRAGGLER]["hosts"] = sorted({*causes[STRAGGLER]["hosts"], straggler["host"]})
        causes[STRAGGLER]["ranks"].append({"host": straggler["host"], "rank": straggler["rank"]})
    verdicts = {n["verdict"] for n in nodes}
    verdict = ("departure" if causes or "departure" in verdicts else
               "inconclusive" if "inconclusive" in verdicts else "clean")
    return {"fieldguide_version": __version__, "schema_version": SCHEMA_VERSION, "created": utc_now(), "merged_from": [p for p, _ in reports],
            "verdict": verdict, "causes": list(causes.values()), "slow_node": slow_node, "straggler": straggler,
            "nodes": nodes,
            "ranks": ranks}


# -- rendering ----------------------------------------------------------------------------------------

def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column.replace(" ", "_"))
    if column == "cause":  # a clean report's rows show its healthy leaf
        value = value or row.get("conclusion")
    if value is None or value == "":
        return "" if column == "cause" else "n/a"
    if column in ("data wait", "collective wait"):
        return f"{value:.0%}"
    if column in ("step ms", "own ms"):
        return f"{value:.3g}"
    return str(value)


def _where(entry: dict[str, Any]) -> str:
    ranks = [f"rank {r['rank']} on {r['host']}" for r in entry["ranks"] if r["rank"] is not None]
    return ", ".join(ranks) or ", ".join(entry["hosts"])


def _lines(merged: dict[str, Any]) -> tuple[str, list[str]]:
    """The headline and the sentences every format shows above the tables."""
    n_nodes, n_ranks = len(merged["nodes"]), len(merged["ranks"])
    head = f"{merged['verdict']}: {n_nodes} reports, {n_ranks} ranks"
    said = [f"{c['cause']}: {c['title']} ({_where(c)})" for c in merged["causes"]]
    node = merged.get("slow_node")
    if node:
        ranks = ", ".join(map(str, node["ranks"]))
        said.insert(0, f"Slow node: {node['node']} ({node['host']}), rank{'s' if len(node['ranks']) > 1 else ''} {ranks}: its "
                       f"ranks' own work is {node['own_work_ratio']:.2f}x the other nodes', whose ranks wait "
                       f"{node['others_wait_fraction']:.0%} or more of their step")
    s = merged["straggler"]
    if s:
        how = ["named by " + ", ".join(s["named_by"])] if s["named_by"] else []
        if s["own_work_ratio"]:
            waits = s["others_wait_fraction"]
            how.append(f"its own work is {s['own_work_ratio']:.2f}x the other ranks' median"
                       + (f", and they wait {waits:.0%} or more of their step" if waits is not None else ""))
        said.append(f"Straggler: rank {s['rank']} on {s['host']}: {'; '.join(how)}")
    return head, said


def merged_sections(merged: dict[str, Any]) -> list[Section]:
    """The merged view as report sections. Hosts, paths and causes come from the reports' files:
    each format shows them as they are, never as markup."""
    head, said = _lines(merged)
    node_columns = ("host", "node rank", "verdict", "cause", "ranks", "step ms", "report")

    def table(columns: tuple[str, ...], rows: list[dict[str, Any]]) -> Table:
        return Table(columns, tuple(tuple(Cell(_cell(r, c)) for c in columns) for r in rows))

    return [Title("fieldguide: merged report"), Paragraph((Span("Verdict", "bold"), Span(f": {head}"))),
            *([Bullets(tuple(said))] if said else []),
            Heading(2, "Nodes"), table(node_columns, merged["nodes"]), Heading(2, "Ranks"), table(COLUMNS, merged["ranks"]),
            Paragraph((Span(f"Merged by fieldguide {merged['fieldguide_version']} at {merged['created']}."),))]


def render_merged(merged: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(merged, indent=2, default=str) + "\n"
    try:
        module = format_module(fmt)
    except ValueError as err:
        raise FieldguideError(str(err)) from None
    return str(module.document(merged_sections(merged)))
