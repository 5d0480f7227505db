"""The JSON report: the contract's fields (Findings.to_json), secrets redacted there."""

from __future__ import annotations

import json

from fieldguide.report.findings import Findings

NAME = "json"
SUFFIXES = (".json",)


def render(findings: Findings) -> str:
    return json.dumps(findings.to_json(), indent=2, default=str) + "\n"
