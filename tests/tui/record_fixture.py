"""Record a real walk of the bundled demo workload into tests/tui/fixtures/demo_walk.json.

Live numbers vary run to run, so the SVG snapshot tests replay what one real run measured
(tests/tui/replay.py). Run this once (about 20 s) when the playbook, the probes or the demo
change, then regenerate the snapshots:

    .venv/bin/python tests/tui/record_fixture.py
    .venv/bin/python -m pytest tests/tui -k snapshot --snapshot-update
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fieldguide import workloads
from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.walk.session import Session, demo_command, open_target

FIXTURE = Path(__file__).with_name("fixtures") / "demo_walk.json"
PID = 4242  # the recorded pid and command line are replaced by stable ones, so snapshots do not vary


def record(path: Path = FIXTURE) -> dict[str, Any]:
    playbook = find_playbook("slow-training")
    readings: dict[str, dict[str, Any]] = {}

    def on_reading(reading: dict[str, Any]) -> None:
        readings[str(reading.get("probe"))] = {**readings.get(str(reading.get("probe")), {}), **reading}

    target = open_target(None, demo_command())
    session = Session(playbook, target, on_reading=on_reading)
    measured: list[dict[str, Any]] = []
    real_measure = session.runner.measure_probe

    def recording(probe_id: str, params: dict[str, Any]) -> Measurement:
        m = real_measure(probe_id, params)
        if not m.reused:
            measured.append({"probe": probe_id, "params": params, "measurement": m.to_json()})
        return m

    session.runner.measure_probe = recording  # type: ignore[method-assign]
    try:
        findings = session.run()
        capabilities = sorted(target.capabilities())
    finally:
        target.close()
    real_pid = str(target.pid)
    data = {
        "recorded_from": f"{workloads.DEMO}.py, fieldguide slow-training (real run; pid and paths replaced)",
        "target": {"kind": "launch", "pid": PID, "cmdline": ["python", f"{workloads.DEMO}.py"]},
        "capabilities": capabilities,
        "environment": findings.environment,
        "verdict": findings.verdict,
        "measurements": measured,
        "readings": readings,
    }
    text = json.dumps(data, indent=1, default=str)
    text = text.replace(str(Path(workloads.path(workloads.DEMO)).parent) + "/", "")
    text = text.replace(f"pid {real_pid}", f"pid {PID}").replace(f'"{real_pid}"', f'"{PID}"')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return data


if __name__ == "__main__":
    out = record()
    print(f"recorded {len(out['measurements'])} measurements, verdict {out['verdict']}, into {FIXTURE}",
          file=sys.stderr)
