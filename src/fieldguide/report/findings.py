"""The findings of a walk: one object that the TUI, the summary and every exporter read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from fieldguide import __version__
from fieldguide.engine import DEPARTURE, Walk
from fieldguide.report.redact import redact_argv, redact_env, redact_text, redact_tree

# Environment variables worth carrying into a report (values redacted if secret-looking).
RELEVANT_ENV_PREFIXES = ("CUDA_", "PYTORCH_", "TORCH", "NCCL_", "OMP_", "MKL_", "KMP_", "NVIDIA_", "HF_", "WORLD_SIZE",
                         "RANK", "LOCAL_RANK", "MASTER_")


@dataclass
class Findings:
    playbook: str
    playbook_title: str
    target: dict[str, Any]
    environment: dict[str, Any]
    verdict: str
    first_departure: dict[str, Any] | None
    conclusion: str | None
    conclusion_text: str
    path: list[dict[str, Any]]
    created: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    note: str = ""
    log_tail: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {
            "fieldguide_version": __version__,
            "created": self.created,
            "playbook": self.playbook,
            "playbook_title": self.playbook_title,
            "target": self.target,
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
        return redact_tree(data)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Findings:
        """Rebuild from a saved report; ValueError if it is not one."""
        if not isinstance(data, dict) or data.get("verdict") not in ("departure", "clean", "inconclusive"):
            raise ValueError("no verdict of departure, clean or inconclusive")
        path = data.get("path", [])
        if not isinstance(path, list) or not all(isinstance(p, dict) and {"node", "status"} <= set(p) for p in path):
            raise ValueError("path entries need node and status")
        if data["verdict"] == "departure" and not isinstance(data.get("first_departure"), dict):
            raise ValueError("a departure report needs first_departure")
        return cls(playbook=data["playbook"], playbook_title=str(data.get("playbook_title") or data["playbook"]),
                   target=data.get("target", {}), environment=data.get("environment", {}),
                   verdict=data["verdict"], first_departure=data.get("first_departure"),
                   conclusion=data.get("conclusion"), conclusion_text=data.get("conclusion_text", ""),
                   path=data.get("path", []), created=data.get("created", ""), note=data.get("note", ""),
                   log_tail=data.get("log_tail", []), evidence=data.get("evidence", {}),
                   units=data.get("units", {}))


def environment_from(measurement_values: dict[str, Any], gpus: list[dict[str, Any]],
                     variables: dict[str, str] | None = None) -> dict[str, Any]:
    """The report's environment; `variables` is the target's environment (ours if None)."""
    source = os.environ if variables is None else variables
    return {
        "python": measurement_values.get("python"),
        "torch": measurement_values.get("torch"),
        "cuda": measurement_values.get("cuda"),
        "cpu_cores": measurement_values.get("cpu_cores"),
        "nvml": measurement_values.get("nvml"),
        "gpus": gpus,
        "variables": redact_env({k: v for k, v in source.items() if k.startswith(RELEVANT_ENV_PREFIXES)}),
    }


def findings_from_walk(walk: Walk, target: dict[str, Any], environment: dict[str, Any], *,
                       note: str = "", log_tail: list[str] | None = None) -> Findings:
    departure = None
    units: dict[str, str] = {}
    for result in walk.path:
        if result.measurement is not None:
            units.update(result.measurement.units)
    if walk.verdict == DEPARTURE and walk.departure is not None:
        d = walk.departure
        departure = {
            "node": d.node,
            "cause": d.cause.id,
            "title": d.cause.title,
            "measured": d.measured,
            "expected": d.expected,
            "summary": d.summary,
            "why": d.cause.why,
            "fix": list(d.cause.fix),
            "verify": d.cause.verify,
        }
    evidence = {r.node: {"probe": r.probe, "provenance": r.measurement.provenance, **r.measurement.evidence,
                         "values": r.measurement.values}
                for r in walk.path if r.measurement is not None}
    conclusion = walk.conclusion if walk.verdict == "clean" else None
    if walk.caveat and walk.verdict != "departure":
        note = f"{note}; {walk.caveat}" if note else walk.caveat
    target = dict(target)
    target["cmdline"] = redact_argv([str(a) for a in target.get("cmdline", [])])
    return Findings(
        playbook=walk.playbook.id,
        playbook_title=walk.playbook.title,
        target=target,
        environment=environment,
        verdict=walk.verdict,
        first_departure=departure,
        conclusion=conclusion,
        conclusion_text=walk.playbook.leaves.get(conclusion or "", ""),
        path=[r.to_json() for r in walk.path],
        note=note,
        log_tail=[redact_text(line) for line in (log_tail or [])],
        evidence=evidence,
        units=units,
    )

