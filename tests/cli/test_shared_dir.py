"""Run as root in a sticky shared folder where another user (nobody) has planted links, pipes and
directories at the names fieldguide would write: every surface writes only its own private files,
and no root-only file changes (issue 33). Skipped where this is not root or nobody cannot be used."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import run_fieldguide

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to plant files as nobody")

NOBODY = 65534


def as_nobody(*argv: str) -> None:
    subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv], check=True,
                   timeout=30)


@pytest.fixture
def shared() -> Iterator[tuple[Path, Path]]:
    """A sticky world-writable folder, and a root-only file beside it that must never change (in a
    folder nobody can reach: pytest's own tmp folder is root's alone)."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="fg-shared-"))
    top.chmod(0o755)
    folder = top / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    secret = top / "root-only"
    secret.write_text("keep")
    secret.chmod(0o600)
    try:
        yield folder, secret
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_planted_report_link_or_pipe_is_refused_and_nothing_changes(shared: tuple[Path, Path]) -> None:
    folder, secret = shared
    as_nobody("ln", "-s", str(secret), str(folder / "r.json"))
    as_nobody("mkfifo", str(folder / "m.md"))
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--report", str(folder / "r.json"),
                          "--pid", str(os.getpid()), timeout=30)
    assert proc.returncode == 2 and "symbolic link" in proc.stderr
    report = folder.parent / "a.json"
    report.write_text(json.dumps({"verdict": "clean", "playbook": "slow-training", "path": [],
                                  "first_departure": None, "conclusion": "device.compute_bound"}))
    proc = run_fieldguide("report", str(report), "-o", str(folder / "m.md"), timeout=30)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr
    assert secret.read_text() == "keep" and stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_a_watch_writes_only_its_own_private_folder_beside_planted_ones(shared: tuple[Path, Path]) -> None:
    folder, secret = shared
    as_nobody("mkdir", str(folder / "theirs"))
    as_nobody("ln", "-s", str(secret.parent), str(folder / "link"))
    for planted in ("theirs", "link"):
        proc = run_fieldguide("watch", "--no-tui", "--report-dir", str(folder / planted), "--", sys.executable,
                              "-c", "pass", timeout=60)
        assert proc.returncode == 2, proc.stderr
    before = set(os.listdir(folder))
    proc = subprocess.run([*_fieldguide(), "watch", "--no-tui", "--", sys.executable, "-c", "pass"], cwd=folder,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr  # the job ended before its baseline
    made = [folder / name for name in set(os.listdir(folder)) - before]
    assert len(made) == 1 and made[0].name.startswith("fieldguide-watch-")
    info = made[0].lstat()
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and stat.S_IMODE(info.st_mode) == 0o700
    assert sorted(os.listdir(secret.parent)) == ["root-only", "shared"]
    assert secret.read_text() == "keep"


def _fieldguide() -> list[str]:
    from tests.conftest import FIELDGUIDE

    return list(FIELDGUIDE)
