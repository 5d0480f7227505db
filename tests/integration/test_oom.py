"""The oom playbook on jobs that end: killed without an exception, and out of memory in its first step."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_fieldguide

pytestmark = pytest.mark.integration

KILLED_AFTER_4_S = textwrap.dedent("""
    import os, time, torch
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(256, 256)
    started = time.monotonic()
    while True:
        loss = model(batch).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if time.monotonic() - started > 4:
            os.kill(os.getpid(), 9)  # as the kernel's OOM killer would: no exception, no cleanup
""")


def test_a_job_killed_by_sigkill_is_a_finding_with_its_last_rss(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED_AFTER_4_S)
    report = tmp_path / "r.json"
    proc = run_fieldguide("diagnose", "--playbook", "oom", "--report", str(report), "--", sys.executable, str(script),
                          timeout=120)
    assert "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    assert data["exit"]["signal"] == "SIGKILL" and data["exit"]["exception"] is None
    tight = next(p for p in data["path"] if p["node"] == "memory.tight")
    assert tight["status"] == "depart" and tight["measured"]["oom"] is True
    evidence = data["evidence"]["memory.tight"]
    assert "killed by SIGKILL" in evidence["provenance"] and "last RSS seen" in evidence["provenance"]
    # No breakdown from a job that got no chance to speak: no cause is named.
    assert data["verdict"] == "inconclusive" and proc.returncode == 3
