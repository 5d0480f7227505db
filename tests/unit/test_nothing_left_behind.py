"""A launched job's whole tree ends with the walk, and a killed fieldguide leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from fieldguide.host.watchdog import OWNER_FILE, claim, marked_processes, sweep_leftovers
from fieldguide.targets import LaunchTarget

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc")

# A job whose grandchild leaves the job's session (setsid after a double fork, as a daemon does)
# and says its pid; the job then waits to be ended.
ESCAPING_JOB = textwrap.dedent("""
    import os, sys, time
    out = sys.argv[1]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(out + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(out + ".tmp", out)
            while True:
                time.sleep(0.1)
        os._exit(0)
    while True:
        time.sleep(0.05)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_for(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def _escaped_pid(path: Path) -> int:
    assert _wait_for(path.exists, 10), "the job's grandchild never started"
    return int(path.read_text())


def test_a_descendant_that_left_the_jobs_session_is_ended_with_the_job(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(ESCAPING_JOB)
    target = LaunchTarget([sys.executable, str(script), str(tmp_path / "escaped.pid")])
    try:
        escaped = _escaped_pid(tmp_path / "escaped.pid")
        assert os.getsid(escaped) != os.getsid(target.pid)  # out of the job's session: killpg misses it
        assert escaped in marked_processes(target._token)
    finally:
        target.close()
    assert _wait_for(lambda: not _alive(escaped), 5), "the escaped grandchild survived the walk"
    assert target._watchdog is not None and target._watchdog.proc.poll() == 0


def test_a_killed_fieldguide_leaves_no_job_no_escaped_child_and_no_directory(tmp_path: Path) -> None:
    """fieldguide SIGKILLed mid-walk: its watchdog ends the job, the job's escaped grandchild and
    removes the job's private directory."""
    script = tmp_path / "job.py"
    script.write_text(ESCAPING_JOB)
    pid_file, dir_file = tmp_path / "escaped.pid", tmp_path / "dir"
    host = textwrap.dedent(f"""
        import sys, time
        from fieldguide.targets import LaunchTarget
        target = LaunchTarget([sys.executable, {str(script)!r}, {str(pid_file)!r}])
        open({str(dir_file)!r}, "w").write(f"{{target._dir}} {{target.pid}}")
        time.sleep(600)
    """)
    fieldguide = subprocess.Popen([sys.executable, "-c", host])
    try:
        escaped = _escaped_pid(pid_file)
        assert _wait_for(lambda: dir_file.exists() and dir_file.read_text(), 10)
        directory, job = dir_file.read_text().split()
        assert Path(directory).is_dir() and _alive(int(job))
        fieldguide.kill()
        fieldguide.wait()
        assert _wait_for(lambda: not _alive(int(job)), 10), "the job outlived a killed fieldguide"
        assert _wait_for(lambda: not _alive(escaped), 10), "the escaped grandchild outlived a killed fieldguide"
        assert _wait_for(lambda: not Path(directory).exists(), 5), "the job's directory was left"
    finally:
        if fieldguide.poll() is None:
            fieldguide.kill()


def test_the_next_run_removes_directories_whose_owner_is_dead_and_keeps_the_rest(tmp_path: Path) -> None:
    dead = tmp_path / "fieldguide-dead"
    dead.mkdir()
    (dead / OWNER_FILE).write_text(f"{2**22 + 7} 12345\n")  # no such process
    reused = tmp_path / "fieldguide-reused"
    reused.mkdir()
    (reused / OWNER_FILE).write_text(f"{os.getpid()} 1\n")  # this pid, but another start time
    live = tmp_path / "fieldguide-live"
    live.mkdir()
    claim(live)
    unmarked = tmp_path / "fieldguide-torch-trace-x"  # a trace kept for the user: no owner file
    unmarked.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    (other / OWNER_FILE).write_text(f"{2**22 + 7} 1\n")
    link = tmp_path / "fieldguide-link"
    link.symlink_to(dead)

    removed = sweep_leftovers(tmp_path)
    assert set(removed) == {dead, reused}
    assert live.is_dir() and unmarked.is_dir() and other.is_dir()


def test_a_launched_jobs_directory_is_claimed_by_its_fieldguide() -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        owner = (target._dir / OWNER_FILE).read_text().split()
        assert owner[0] == str(os.getpid())
    finally:
        target.close()
    assert not target._dir.exists()


def test_the_jobs_mark_is_in_its_environment_and_not_in_fieldguides() -> None:
    assert "FIELDGUIDE_OWNER" not in os.environ
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _wait_for(lambda: target.pid in marked_processes(target._token), 5)
        assert os.getpid() not in marked_processes(target._token)
    finally:
        target.close()


def test_the_watchdog_ignores_a_ctrl_c_meant_for_fieldguide(tmp_path: Path) -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert target._watchdog is not None
        watchdog = target._watchdog.proc
        time.sleep(0.3)  # it has set its handlers
        os.kill(watchdog.pid, signal.SIGINT)
        time.sleep(0.2)
        assert watchdog.poll() is None
        assert target.alive()
    finally:
        target.close()
    assert watchdog.poll() == 0


def test_temporary_directories_are_private(tmp_path: Path) -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert target._dir.stat().st_mode & 0o777 == 0o700
        assert str(target._dir).startswith(tempfile.gettempdir())
        assert (target._dir / "agent.sock").stat().st_mode & 0o777 == 0o600
    finally:
        target.close()
