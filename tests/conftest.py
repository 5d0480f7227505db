"""Shared fixtures: the fieldguide command of this checkout, and workload scripts."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fieldguide.host.kill import kill_tree

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """One inductor cache for this test run, shared by its compile jobs and fresh in every run:
    a cold compile is what a first run costs, and no run may hide it behind an earlier one's cache."""
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="fieldguide-tests-inductor-")
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]


class Lanes:
    """`make test` runs two lanes (pytest-xdist, one worker a core). A test marked `alone` has the
    machine to itself: it waits for the other lane's test to end, and the other lane waits for it.
    Its reading is judged against the same process with nothing beside it (the loader's wait, a
    watch's learned baseline, an A/B's ratio), which a neighbour's start or end would move.

    A readers-writer lock on two files in the run's own temporary root: every test holds the room
    shared, a test alone holds it exclusively; the turnstile lets a waiting `alone` test in before
    tests that come after it. Without xdist there is one lane and nothing to lock."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._files: list[Any] = []

    def enter(self, alone: bool) -> None:
        if self.root is None:
            return
        import fcntl

        turnstile, room = open(self.root / "lane-turnstile", "a+b"), open(self.root / "lane-room", "a+b")
        self._files = [turnstile, room]
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(room, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(room, fcntl.LOCK_SH)

    def leave(self) -> None:
        for handle in reversed(self._files):
            handle.close()  # closing drops its lock
        self._files = []

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """The rest of a test with the machine to itself (its shared hold given up first: two lanes
        upgrading at once would each wait for the other)."""
        self.leave()
        self.enter(alone=True)
        try:
            yield
        finally:
            self.leave()
            self.enter(alone=False)


@pytest.fixture(autouse=True)
def lanes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lanes]:
    root = tmp_path_factory.getbasetemp().parent if "PYTEST_XDIST_WORKER" in os.environ else None
    held = Lanes(root)  # the run's own temporary root (pytest-N), shared by its workers
    held.enter(alone=request.node.get_closest_marker("alone") is not None)
    try:
        yield held
    finally:
        held.leave()


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
