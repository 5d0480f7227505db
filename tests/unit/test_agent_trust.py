"""Only the job's own agent is believed; the job's ending is read whatever hook it set; a bad
override is fieldguide's error, before the job starts, never a crash on the job's own line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from fieldguide.agent.channel import PROTOCOL
from fieldguide.agent.inside.capabilities.overrides import Overrides, override_problems
from fieldguide.errors import BadInput
from fieldguide.targets import LaunchTarget


def _wait_for(predicate: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_a_client_without_the_launchs_token_cannot_pose_as_the_agent() -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _wait_for(lambda: target.agent.primary() is not None, 10)
        real = target.agent.primary()
        assert real is not None and real.pid == target.pid
        impostor = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        impostor.connect(str(target.agent.path))
        messages = ({"type": "hello", "protocol": PROTOCOL, "pid": 1, "rank": {"rank": 0}},
                    {"type": "stream", "capability": "loop", "name": "steps", "items": [[1, 2, 3]] * 50})
        try:  # one write: the host may hang up on the hello before a second write (a broken pipe)
            impostor.sendall("".join(json.dumps(m) + "\n" for m in messages).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # sent away before it finished: what this test wants
        assert _wait_for(lambda: any(c.rejected for c in target.agent._connections), 5)
        impostor.settimeout(5)
        assert impostor.recv(10) == b""  # sent away
        assert target.agent.primary() is real
        assert all(c.pid != 1 for c in target.agent._connections)
        impostor.close()
    finally:
        target.close()


def test_a_message_before_hello_is_not_believed() -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        early = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        early.connect(str(target.agent.path))
        early.sendall(b'{"type": "stream", "capability": "loop", "name": "steps", "items": [[1, 2, 3]]}\n')
        assert _wait_for(lambda: target.agent.primary() is not None, 10)
        time.sleep(0.2)
        assert all(c.steps_total == 0 for c in target.agent._connections)
        early.close()
    finally:
        target.close()


@pytest.mark.parametrize("hook", ["sys.excepthook = lambda *a: print('the job handled it', flush=True)",
                                  "import atexit; sys.excepthook = lambda *a: None"])
def test_a_jobs_own_excepthook_does_not_hide_its_exception(tmp_path: Path, hook: str) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        {hook}
        time.sleep(0.5)
        raise ValueError("the job's own failure")
    """))
    target = LaunchTarget([sys.executable, str(script)])
    try:
        assert target.popen.wait(timeout=30) == 1
        ending = target.ending()
    finally:
        target.close()
    assert ending is not None and ending["exception"] is not None, ending
    assert ending["exception"]["type"] == "ValueError"
    assert ending["exception"]["message"] == "the job's own failure"
    assert ending["exception"]["where"].startswith("job.py:")


@pytest.mark.parametrize("value, problem", [
    ("dataloader.num_workers=abc", "must be a whole number"),
    ("dataloader.num_workers=-1", "must be a whole number"),
    ("dataloader.pin_memory=maybe", "must be true or false"),
    ("dataloader.workers=4", "unknown override"),
    ("dataloader.num_workers", "is not name=value"),
])
def test_a_bad_override_is_named(value: str, problem: str) -> None:
    assert any(problem in p for p in override_problems(value))


def test_good_overrides_have_no_problem() -> None:
    assert override_problems("dataloader.num_workers=4, dataloader.pin_memory=TRUE,compile.dynamic=false") == []
    assert override_problems("") == []


def test_a_bad_override_stops_the_launch_before_the_job_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = dict(os.environ, FIELDGUIDE_OVERRIDES="dataloader.num_workers=four")
    with pytest.raises(BadInput, match="dataloader.num_workers must be a whole number"):
        LaunchTarget([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env=env)
    assert not marker.exists()


def test_the_command_line_says_a_bad_override_in_one_line_and_exits_2(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    env = dict(os.environ, FIELDGUIDE_OVERRIDES="dataloader.pin_memory=yes")
    done = subprocess.run([sys.executable, "-m", "fieldguide", "diagnose", "--playbook", "slow-training", "--no-tui", "--",
                           sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "fieldguide: FIELDGUIDE_OVERRIDES: dataloader.pin_memory must be true or false (got 'yes')"]
    assert not marker.exists()


class _FakeAgent:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def stream(self, capability: str, name: str) -> list[Any]:
        return []

    def hook_failed(self, capability: str, hook: str, err: BaseException) -> None:
        self.failed.append(str(err))


def test_inside_the_job_a_bad_value_is_reported_and_left_out_and_the_good_ones_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIELDGUIDE_OVERRIDES", "dataloader.num_workers=abc,dataloader.pin_memory=true")
    agent = _FakeAgent()
    overrides = Overrides(agent)  # type: ignore[arg-type]
    overrides.start()
    assert overrides.values == {"dataloader.pin_memory": True}
    assert agent.failed and "dataloader.num_workers must be a whole number" in agent.failed[0]
