"""Shared fixtures: the fieldguide command of this checkout, and workload scripts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldguide.host.kill import kill_tree

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """One inductor cache for this test run, shared by its compile jobs and fresh in every run:
    a cold compile is what a first run costs, and no run may hide it behind an earlier one's cache."""
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fieldguide-tests-inductor-")
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]


def check_report(data: dict) -> None:
    """A report a real walk wrote matches the JSON Schema the package ships."""
    import json
    from importlib import resources

    import jsonschema

    schema = json.loads(resources.files("fieldguide.report").joinpath("schema/report.schema.json").read_text())
    jsonschema.validate(data, schema)


def check_artifacts(data: dict) -> set[str]:
    """Every file a report lists for a viewer exists and opens as that viewer's format; the kinds."""
    import json
    from pathlib import Path

    kinds = set()
    for artifact in data.get("artifacts") or []:
        path = Path(artifact["path"])
        assert path.is_file(), artifact
        kinds.add(artifact["kind"])
        if artifact["kind"] == "speedscope":
            profile = json.loads(path.read_text())
            assert profile["$schema"] == "https://www.speedscope.app/file-format-schema.json"
            frames = len(profile["shared"]["frames"])
            for p in profile["profiles"]:
                assert p["type"] == "sampled" and len(p["samples"]) == len(p["weights"]) > 0
                assert all(0 <= i < frames for stack in p["samples"] for i in stack)
        elif artifact["kind"] == "perfetto":
            trace = json.loads(path.read_text())
            assert trace["traceEvents"], "an empty trace"
    return kinds


def run_fieldguide(*args: str, timeout: float = 120, env: dict[str, str] | None = None,
                   cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "FIELDGUIDE_WORKLOAD_SECONDS": "60", "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    return subprocess.run([*FIELDGUIDE, *args], capture_output=True, text=True, timeout=timeout, env=full_env,
                          cwd=cwd)


@pytest.fixture
def workload_process(tmp_path_factory: pytest.TempPathFactory):
    """Start a zoo workload as a plain process (no agent), for attach tests; killed afterwards.

    Returned once it trains: the zoo's training loops print their first "step" line after 1.5 s
    of steps. A fixed wait is not enough: 2 ranks under torchrun on 2 cores were still starting
    (importing torch, DDP's first broadcast) 6 s in, and a walk that compared them then read
    their start-up, not their steps. A workload declared not to train gets `warmup` seconds."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, warmup: float = 6.0, trains_within: float = 60.0) -> subprocess.Popen[bytes]:
        from fieldguide import workloads

        log = tmp_path_factory.mktemp("workload") / f"{name}.log"
        with log.open("wb") as out:
            # Under its declared launcher (torchrun for a multi-rank workload): the test attaches to the launcher.
            proc = subprocess.Popen(workloads.command(name, sys.executable),
                                    env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="90", PYTHONUNBUFFERED="1"),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        trains = workloads.declarations()[name].verdict != "inconclusive"
        deadline = time.monotonic() + (trains_within if trains else warmup)
        while time.monotonic() < deadline and proc.poll() is None:
            if trains and b"step" in log.read_bytes():
                break
            time.sleep(0.2)
        else:
            assert not trains or proc.poll() is not None, f"{name} printed no step in {trains_within:.0f} s"
        assert proc.poll() is None, f"{name} exited early: {log.read_text(errors='replace')[-2000:]}"
        return proc

    yield start
    for proc in started:
        kill_tree(proc)
