"""The core never imports Textual, torch or pynvml (DESIGN.md): checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

CHECK = """
import json, sys
import fieldguide.frontends.cli, fieldguide.walk.engine, fieldguide.playbook, fieldguide.report, fieldguide.report.summary
import fieldguide.walk.session
from fieldguide.probes import registry
registry.ids()  # imports every built-in probe module
from fieldguide.playbook import find_playbook
find_playbook("slow-training")
print(json.dumps(sorted(m for m in ("textual", "torch", "pynvml") if m in sys.modules)))
"""


def test_core_imports_no_textual_torch_or_pynvml():
    # A subprocess is unavoidable: this test session itself may have imported any of them.
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
