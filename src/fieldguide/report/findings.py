"""The findings of a walk: one object that the TUI, the summary and every exporter read."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

from fieldguide import __version__
from fieldguide.errors import FieldguideError
from fieldguide.measurement import format_value
from fieldguide.probes import evidence as ev
from fieldguide.probes.evidence import (
    Artifact,
    ColdStart,
    EvidenceKind,
    JobIdentity,
    RankRow,
    StackShare,
)
from fieldguide.report.redact import redact_argv, redact_env, redact_text, redact_tree
from fieldguide.report.vocabulary import ACTIONS, VERDICTS
from fieldguide.walk.engine import DEPARTURE, Walk

if TYPE_CHECKING:
    from fieldguide.walk.engine import NodeResult

T = TypeVar("T")

# Environment variables worth carrying into a report (values redacted if secret-looking).
RELEVANT_ENV_PREFIXES = ("CUDA_", "PYTORCH_", "TORCH", "NCCL_", "OMP_", "MKL_", "KMP_", "NVIDIA_", "HF_", "WORLD_SIZE",
                         "RANK", "LOCAL_RANK", "MASTER_")

# The JSON report's shape (report/schema/report.schema.json): fields may be added under one
# version; a field renamed or retyped is a new one.
SCHEMA_VERSION = 1


# How deep a saved report's JSON may nest: a report is a few levels deep; a file nested thousands
# deep is no report, and walking it would exhaust the stack (a RecursionError, not a message).
MAX_DEPTH = 100


def check_depth(data: Any, most: int = MAX_DEPTH) -> None:
    """ValueError if `data` (parsed JSON) nests more than `most` lists and objects deep; iterative."""
    todo: list[tuple[Any, int]] = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > most:
            raise ValueError(f"nested more than {most} deep")
        todo.extend((child, depth + 1) for child in children)


def load_report(path: Path) -> Findings:
    """A saved JSON report read back; FieldguideError (one line, exit 2) for a file that cannot be
    read or is no report: not JSON, nested deeper than the parser's stack, not a report's shape."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FieldguideError(f"no such report: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise FieldguideError(f"cannot read {path}: {getattr(err, 'strerror', None) or err}") from None
    try:
        return Findings.from_json(json.loads(text))
    except json.JSONDecodeError:
        raise FieldguideError(f"{path} is not a fieldguide JSON report (not JSON)") from None
    except RecursionError:  # the parser's own limit: a file nested thousands deep
        raise FieldguideError(f"{path} is not a fieldguide JSON report (nested too deeply)") from None
    except KeyError as err:
        raise FieldguideError(f"{path} is not a fieldguide JSON report (no {err.args[0]})") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise FieldguideError(f"{path} is not a fieldguide JSON report ({err})") from None


def _target_redacted(target: dict[str, Any]) -> dict[str, Any]:
    """The target with its command line read as argv (`--pass X`: X is the secret), which a
    saved report from any version gets too; text redaction alone sees `X` on its own."""
    cmdline = target.get("cmdline") if isinstance(target, dict) else None
    if not isinstance(cmdline, list):
        return target
    return {**target, "cmdline": redact_argv([str(a) for a in cmdline])}


class _DepartureShare(TypedDict, total=False):
    share: float  # the share of the step its node measured (the value `share_name`)
    share_name: str
    at: str  # where that share is spent


class Departure(_DepartureShare):
    """The report's `first_departure`: where the walk departed, the cause and its page."""

    node: str
    cause: str
    title: str
    measured: dict[str, Any]
    expected: str
    summary: str
    why: str
    fix: list[str]
    verify: str


class AlsoDeparting(TypedDict, total=False):
    """Another departure the walk named: its node, cause and title, the share of the step it
    measured (`share`, the value `share_name`), where that is spent (`at`), and its summary."""

    node: str
    cause: str
    title: str
    share: float | None
    share_name: str | None
    at: str | None
    summary: str


class PathStep(TypedDict, total=False):
    """One node of the report's `path` (engine.NodeResult.to_json); a TUI re-measure adds `action`
    and `when` (the report's `reruns`)."""

    node: str
    status: str
    measured: dict[str, Any]
    expected: str
    probe: str | None
    seconds: float
    note: str
    undecided: bool
    action: str
    when: str


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def exit_text(ended: dict[str, Any]) -> str:
    """How the target ended, in one line: `exit code 1 · RuntimeError: boom (train.py:12)`.

    `ended` is the report's `exit` (Target.ending): `code` (the exit status), `signal` (its
    name), `exception` (the uncaught exception: a dict of type, message and where, or a string),
    and `text` (the target's own sentence, used when none of those is known)."""
    parts = []
    if ended.get("code") is not None:
        parts.append(f"exit code {ended['code']}")
    if ended.get("signal"):
        parts.append(f"signal {ended['signal']}")
    exc = ended.get("exception")
    if isinstance(exc, dict):
        what = ": ".join(str(exc[k]) for k in ("type", "message") if exc.get(k))
        if what:
            parts.append(what + (f" ({exc['where']})" if exc.get("where") else ""))
    elif exc:
        parts.append(str(exc) + (f": {ended['message']}" if ended.get("message") else ""))
    return " · ".join(parts) or str(ended.get("text") or "it exited")


@dataclass
class Findings:
    """The findings of one walk. Every view reads this object (the rich summary in summary.py, the
    JSON, Markdown and HTML exporters); it knows none of them.

    `reruns`: what the user measured beyond the walk in the TUI (re-runs, jumps, re-measures),
    each a dict of node, action, status, measured, expected, note, probe, seconds and when.
    `exit`: how a target that ended during the walk ended (see `exit_text`), or None.
    `experiments`: fixes tried by relaunching the job (`--try-fix`), each with what changed, how,
    and every arm's median step with its spread (see fieldguide/experiments/tryfix.py).
    `cold_start`: a launched job's start taken apart (fieldguide/analysis/coldstart.py): `phases`, each
    {phase, title, start_s, seconds} from the process start on, consecutive, and `total_s`, the
    wall time to steady state; `steady_step` the step from which steps stay within 10% of the median.
    `ranks`: per rank of a multi-rank job: rank, node_rank, pid, host, step_ms, own_ms, data_wait,
    collective_wait, verdict; one local rank of a larger job included.
    `job`: which multi-rank job (`id`, `master`, `world_size`): `report merge` joins one job's reports.
    """

    playbook: str
    playbook_title: str
    target: dict[str, Any]
    environment: dict[str, Any]
    verdict: str
    first_departure: Departure | None
    conclusion: str | None
    conclusion_text: str
    path: list[PathStep]
    created: str = field(default_factory=utc_now)
    note: str = ""
    log_tail: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    reruns: list[PathStep] = field(default_factory=list)
    exit: dict[str, Any] | None = None
    experiments: list[dict[str, Any]] = field(default_factory=list)
    cold_start: ColdStart | None = None
    ranks: list[RankRow] = field(default_factory=list)
    job: JobIdentity | None = None
    # The CPU contention over the walk's windows (probes/contention.py `summarize`), and the CPU
    # seconds fieldguide itself used (its samplers included).
    contention: dict[str, Any] = field(default_factory=dict)
    self_cpu_s: float | None = None
    # Files left for the usual viewers (report/artifacts.py): speedscope, Perfetto, tlparse.
    artifacts: list[Artifact] = field(default_factory=list)
    # The other departures the walk named, largest share first (first_departure has the largest).
    also_departing: list[AlsoDeparting] = field(default_factory=list)
    # The step budget (probes/step_budget.py): each part of the training thread's time, its share
    # and margin, where it is spent; largest first.
    budget: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "fieldguide_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "playbook": self.playbook,
            "playbook_title": self.playbook_title,
            "target": _target_redacted(self.target),
            "environment": self.environment,
            "verdict": self.verdict,
            "first_departure": self.first_departure,
            "conclusion": self.conclusion,
            "conclusion_text": self.conclusion_text,
            "note": self.note,
            "path": self.path,
            "evidence": self.evidence,
            "units": self.units,
            "log_tail": self.log_tail,
        }
        if self.reruns:
            data["reruns"] = self.reruns
        if self.exit:
            data["exit"] = self.exit
        if self.experiments:
            data["experiments"] = self.experiments
        if self.cold_start:
            data["cold_start"] = self.cold_start
        if self.ranks:
            data["ranks"] = self.ranks
        if self.job:
            data["job"] = self.job
        if self.contention:
            data["contention"] = self.contention
        if self.self_cpu_s is not None:
            data["self_cpu_s"] = self.self_cpu_s
        if self.artifacts:
            data["artifacts"] = self.artifacts
        if self.also_departing:
            data["also_departing"] = self.also_departing
        if self.budget:
            data["budget"] = self.budget
        redacted: dict[str, Any] = redact_tree(data)
        return redacted

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Findings:
        """Rebuild from a saved report; ValueError if it is not one."""
        check_depth(data)
        if not isinstance(data, dict) or data.get("verdict") not in VERDICTS:
            raise ValueError("no verdict of departure, clean or inconclusive")
        for name, kind in (("target", dict), ("environment", dict), ("evidence", dict), ("units", dict),
                           ("log_tail", list)):  # every view reads these as such
            if not isinstance(data.get(name, kind()), kind):
                raise ValueError(f"{name} must be {'an object' if kind is dict else 'a list'}")
        path = data.get("path", [])
        if not isinstance(path, list) or not all(isinstance(p, dict) and {"node", "status"} <= set(p) for p in path):
            raise ValueError("path entries need node and status")
        if data["verdict"] == "departure" and not isinstance(data.get("first_departure"), dict):
            raise ValueError("a departure report needs first_departure")
        reruns = data.get("reruns") or []
        if not isinstance(reruns, list) or not all(isinstance(r, dict) and {"node", "action", "status"} <= set(r)
                                                   for r in reruns):
            raise ValueError("reruns entries need node, action and status")
        ended = data.get("exit")
        if ended is not None and not isinstance(ended, dict):
            raise ValueError("exit must be an object")
        experiments = data.get("experiments") or []
        if not isinstance(experiments, list) or not all(isinstance(e, dict) and "cause" in e for e in experiments):
            raise ValueError("experiments entries need a cause")
        cold_start = data.get("cold_start")
        if cold_start is not None and not (isinstance(cold_start, dict) and isinstance(cold_start.get("phases"), list)):
            raise ValueError("cold_start needs a list of phases")
        ranks = data.get("ranks") or []
        if not isinstance(ranks, list) or not all(isinstance(r, dict) and "rank" in r for r in ranks):
            raise ValueError("ranks entries need a rank")
        return cls(playbook=data["playbook"], playbook_title=str(data.get("playbook_title") or data["playbook"]),
                   target=data.get("target", {}), environment=data.get("environment", {}),
                   verdict=data["verdict"], first_departure=data.get("first_departure"),
                   conclusion=data.get("conclusion"), conclusion_text=data.get("conclusion_text", ""),
                   path=data.get("path", []), created=data.get("created", ""), note=data.get("note", ""),
                   log_tail=data.get("log_tail", []), evidence=data.get("evidence", {}),
                   units=data.get("units", {}), reruns=reruns, exit=ended or None, experiments=experiments,
                   cold_start=cast(ColdStart, cold_start) if cold_start else None, ranks=ranks,
                   job=cast(JobIdentity, data["job"]) if isinstance(data.get("job"), dict) else None,
                   contention=dict(data.get("contention") or {}) if isinstance(data.get("contention"), dict) else {},
                   self_cpu_s=data.get("self_cpu_s") if isinstance(data.get("self_cpu_s"), (int, float)) else None,
                   artifacts=_artifacts(data.get("artifacts")),
                   also_departing=[cast(AlsoDeparting, a) for a in _dicts(data.get("also_departing"), "cause")],
                   budget=_dicts(data.get("budget"), "part", "share"))

    def redacted(self) -> Findings:
        """These findings as every view shows them: every secret-looking string redacted."""
        return Findings.from_json(json.loads(json.dumps(self.to_json(), default=str)))

    # -- what every view reads -------------------------------------------------------------------

    def formatted(self, measured: dict[str, Any]) -> list[tuple[str, str]]:
        """Measured values as a person reads them, with their units: [(name, "93%"), ...]."""
        return [(name, format_value(value, self.units.get(name, ""))) for name, value in measured.items()]

    def chain(self) -> list[PathStep]:
        """The path from the departed node on: the departure and the nodes that refined its cause."""
        if self.first_departure is None:
            return []
        nodes = [step["node"] for step in self.path]
        node = self.first_departure["node"]
        return self.path[nodes.index(node):] if node in nodes else list(self.path)

    def of_kind(self, kind: EvidenceKind[T], nodes: list[str] | None = None) -> list[tuple[str, T]]:
        """Each node (of `nodes`, all by default, in that order) whose evidence holds `kind`, with it."""
        chosen = list(self.evidence) if nodes is None else nodes
        return [(node, found) for node in chosen
                if (found := kind.of(self.evidence.get(node))) is not None]

    def first_of(self, kind: EvidenceKind[T], nodes: list[str] | None = None) -> T | None:
        found = self.of_kind(kind, nodes)
        return found[0][1] if found else None

    def top_stacks(self, nodes: list[str] | None = None) -> tuple[str, list[StackShare]]:
        """The most frequent stacks that the nodes (all, by default) sampled: the main thread's
        if any were sampled, else the DataLoader workers'. Returns (whose, stacks)."""
        for kind, whose in ((ev.TOP_STACKS, "main thread"), (ev.TOP_WORKER_STACKS, "DataLoader workers")):
            stacks = self.first_of(kind, nodes)
            if stacks:
                return whose, list(stacks)
        return "", []

    def found_rows(self) -> list[dict[str, Any]]:
        """The departed node's evidence table (graph breaks, recompiles), if its probe left one."""
        node = self.first_departure["node"] if self.first_departure else None
        rows = self.first_of(ev.TABLE, [node]) if node else None
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    def experiment_rows(self) -> list[tuple[str, list[list[str]], str]]:
        return experiment_rows(self.experiments)

    def exit_line(self) -> str:
        """"The target ended: ..." when it ended during the walk, else ""."""
        return f"The target ended: {exit_text(self.exit)}" if self.exit else ""

    def record_rerun(self, result: NodeResult, action: str, when: str | None = None) -> None:
        """A node the user measured again in the TUI (a re-run, a jump, a re-measure)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; one of {', '.join(ACTIONS)}")
        entry = result.to_json()
        self.reruns.append({"node": entry["node"], "action": action, "status": entry["status"],
                            "measured": entry["measured"], "expected": entry["expected"], "note": entry["note"],
                            "probe": entry["probe"], "seconds": entry["seconds"], "when": when or utc_now()})
        if result.measurement is not None:
            for name, unit in result.measurement.units.items():
                self.units.setdefault(name, unit)


def environment_from(measurement_values: dict[str, Any], gpus: list[dict[str, Any]],
                     variables: dict[str, str] | None = None) -> dict[str, Any]:
    """The report's environment; `variables` is the target's environment (ours if None)."""
    source = os.environ if variables is None else variables
    return {
        "host": socket.gethostname(),  # which node: `report merge` tells the nodes of a job apart by it
        "python": measurement_values.get("python"),
        "torch": measurement_values.get("torch"),
        "cuda": measurement_values.get("cuda"),
        "cpu_cores": measurement_values.get("cpu_cores"),
        "nvml": measurement_values.get("nvml"),
        "gpus": gpus,
        "variables": redact_env({k: v for k, v in source.items() if k.startswith(RELEVANT_ENV_PREFIXES)}),
    }


def _dicts(value: Any, *needed: str) -> list[dict[str, Any]]:
    """A saved report's list of objects, those holding `needed` (anything else is passed over)."""
    if not isinstance(value, list):
        return []
    return [dict(v) for v in value if isinstance(v, dict) and all(k in v for k in needed)]


def _artifacts(value: Any) -> list[Artifact]:
    """A saved report's artifacts: those with a kind and a path (anything else is passed over)."""
    if not isinstance(value, list):
        return []
    return [cast(Artifact, a) for a in value
            if isinstance(a, dict) and isinstance(a.get("kind"), str) and isinstance(a.get("path"), str)]


def findings_from_walk(walk: Walk, target: dict[str, Any], environment: dict[str, Any], *,
                       note: str = "", log_tail: list[str] | None = None) -> Findings:
    departure = None
    units: dict[str, str] = {}
    for result in walk.path:
        if result.measurement is not None:
            units.update(result.measurement.units)
    if walk.verdict == DEPARTURE and walk.departure is not None:
        d = walk.departure
        departure = Departure(**{
            "node": d.node,
            "cause": d.cause.id,
            "title": d.cause.title,
            "measured": d.measured,
            "expected": d.expected,
            "summary": d.summary,
            "why": d.cause.why,
            "fix": list(d.cause.fix),
            "verify": d.cause.verify,
        })
        if d.share is not None and d.share_name:
            departure["share"], departure["share_name"] = d.share, d.share_name
        if d.at:
            departure["at"] = d.at
    evidence = {r.node: {"probe": r.probe, "provenance": r.measurement.provenance, **r.measurement.evidence,
                         "values": r.measurement.values,
                         **({"margins": r.measurement.margins} if r.measurement.margins else {})}
                for r in walk.path if r.measurement is not None}
    conclusion = walk.conclusion if walk.verdict == "clean" else None
    if walk.caveat:  # a departure's caveat: a share whose cause was not named, a walk cut short
        note = f"{note}; {walk.caveat}" if note else walk.caveat
    target = dict(target)
    target["cmdline"] = redact_argv([str(a) for a in target.get("cmdline", [])])
    also = [AlsoDeparting(node=d.node, cause=d.cause.id, title=d.cause.title, share=d.share, share_name=d.share_name,
                          at=d.at, summary=d.summary) for d in walk.also] if walk.verdict == DEPARTURE else []
    return Findings(
        also_departing=also,
        playbook=walk.playbook.id,
        playbook_title=walk.playbook.title,
        target=target,
        environment=environment,
        verdict=walk.verdict,
        first_departure=departure,
        conclusion=conclusion,
        conclusion_text=_with_unmeasured(walk.playbook.leaves.get(conclusion or "", ""), walk.path),
        path=[cast(PathStep, r.to_json()) for r in walk.path],
        note=note,
        log_tail=[redact_text(line) for line in (log_tail or [])],
        evidence=evidence,
        units=units,
    )


def _with_unmeasured(text: str, path: list[Any]) -> str:
    """A healthy leaf's text, and what it does not cover: the nodes skipped on the way, by reason
    (a GPU-less machine's node-check is no word on GPUs)."""
    if not text:
        return text
    by_reason: dict[str, list[str]] = {}
    for result in path:
        if result.status == "skip" and not result.undecided:
            by_reason.setdefault(result.note.split("; ")[0] or "not measured", []).append(result.node)
    if not by_reason:
        return text
    return text + " Not measured, so not covered: " + "; ".join(
        f"{', '.join(nodes)} ({reason})" for reason, nodes in by_reason.items()) + "."


def _peaks(arm: dict[str, Any]) -> str:
    """An arm's peak memory: resident (its processes) and, on a GPU, the CUDA allocator's."""
    rss, cuda = arm.get("peak_rss_mb"), arm.get("peak_cuda_mb")
    said = [f"{rss:.0f} RSS" if isinstance(rss, (int, float)) else "", f"{cuda:.0f} CUDA" if isinstance(cuda, (int, float)) else ""]
    return ", ".join(part for part in said if part) or "n/a"


# Short cells only, so that the table fits 80 columns; where each change was applied (a path and
# a line) is listed under it (experiment_applied).
EXPERIMENT_COLUMNS = ("arm", "step ms (q1-q3)", "vs launched (rounds)", "losses", "steps", "peak MB")


def _losses(arm: dict[str, Any]) -> str:
    """An arm's losses against the job's (where the experiment compares them): same, different,
    or cannot tell, with the largest relative difference."""
    found = arm.get("losses")
    if not found:
        return ""
    if found.get("equivalent") is None:
        return "cannot tell"
    rel = found.get("max_rel")
    if rel == 0:
        return "identical"
    shown = "" if not isinstance(rel, (int, float)) else " (not finite)" if rel == float("inf") else f" ({rel:.0e})"
    return ("same" if found["equivalent"] else "different") + shown


def experiment_applied(experiment: dict[str, Any]) -> list[str]:
    """Where each arm's change was applied, one line an arm: "intra_op=2: intra_op=2 at train.py:12"."""
    return [f"{arm['arm']}: {'; '.join(arm['applied'])}" for arm in experiment.get("arms") or [] if arm.get("applied")]


def experiment_rows(experiments: list[dict[str, Any]]) -> list[tuple[str, list[list[str]], str]]:
    """Per experiment: its title, a row per arm (EXPERIMENT_COLUMNS: arm, step ms with quartiles,
    vs the job, losses, steps, peak memory), and its verdict or why it did not run."""
    found: list[tuple[str, list[list[str]], str]] = []
    for exp in experiments:
        if not exp.get("ran"):
            found.append((f"Fix of {exp['cause']} not tried", [], str(exp.get("why", ""))))
            continue
        rows = []
        for arm in exp.get("arms") or []:
            ratio = ("" if arm.get("vs_a") is None else
                     f"{arm['vs_a']:.0%} ({arm['vs_a_min']:.0%}-{arm['vs_a_max']:.0%})")
            spread = (f"{arm['step_ms']:.3g} ({arm['step_ms_q1']:.3g}-{arm['step_ms_q3']:.3g})"
                      if arm.get("step_ms") is not None else "n/a")
            losses = _losses(arm) or ("baseline" if not ratio and any(a.get("losses") for a in exp["arms"]) else "")
            rows.append([str(arm["arm"]), spread, ratio or "baseline", losses, str(arm["steps"]), _peaks(arm)])
        verdict = str(exp.get("verdict", "")) + (f"; the sweep {exp['shape']}" if exp.get("shape") else "")
        found.append((f"Fix of {exp['cause']} tried, {exp.get('rounds')} rounds in turns", rows, verdict))
    return found
