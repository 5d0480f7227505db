"""Reports and views are written so that running fieldguide as root clobbers nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fieldguide.safewrite import UnsafePath, refusal, write_text


def test_a_link_planted_where_a_temporary_file_used_to_go_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "root-only"
    victim.write_text("secret\n")
    (tmp_path / "diag.json.tmp").symlink_to(victim)  # the name the report's temporary file once had
    write_text(tmp_path / "diag.json", "{}\n")
    assert victim.read_text() == "secret\n"
    assert (tmp_path / "diag.json").read_text() == "{}\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []


def test_a_link_a_device_or_a_directory_as_the_report_is_refused_in_one_line(tmp_path: Path) -> None:
    victim = tmp_path / "root-only"
    victim.write_text("secret\n")
    (tmp_path / "diag.json").symlink_to(victim)
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        write_text(tmp_path / "diag.json", "{}\n")
    assert victim.read_text() == "secret\n" and (tmp_path / "diag.json").is_symlink()
    for device in ("/dev/null", "/dev/full"):
        with pytest.raises(UnsafePath, match="not a regular file"):
            write_text(Path(device), "report\n")
        assert Path(device).is_char_device()
    with pytest.raises(UnsafePath, match="is a directory"):
        write_text(tmp_path, "x")
    assert refusal(tmp_path / "new.json") is None and refusal(victim) is None


def test_a_replaced_report_keeps_its_permissions(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text(path, "new")
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o640


def _as_another_user(path: Path, mode: int) -> None:
    os.chmod(path, mode)
    os.chown(path, 65534, 65534)  # nobody


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


@needs_root
def test_another_users_file_replaced_by_root_does_not_pass_on_its_mode(tmp_path: Path) -> None:
    """An unprivileged user plants diag.json 0666 (or setuid) in a shared directory; root's
    report replaces it and must not be world-writable, nor keep a set-id bit."""
    planted = tmp_path / "diag.json"
    planted.write_text("planted")
    _as_another_user(planted, 0o4777)
    old_umask = os.umask(0o022)
    try:
        write_text(planted, "{}\n")
    finally:
        os.umask(old_umask)
    info = planted.stat()
    assert info.st_uid == 0 and (info.st_mode & 0o7777) == 0o644


def test_an_own_file_keeps_its_mode_without_set_id_bits(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    os.chmod(path, 0o2640)
    write_text(path, "new")
    assert (path.stat().st_mode & 0o7777) == 0o640


@needs_root
def test_the_compile_trace_folder_is_never_one_someone_else_made(tmp_path: Path) -> None:
    """TORCH_TRACE goes beside the report, a name derived from it: a link or another user's folder
    there is not used; a folder of this user's own from an earlier run is."""
    from fieldguide.safewrite import private_directory

    victim = tmp_path / "root-only"
    victim.mkdir()
    (tmp_path / "a-torch-trace").symlink_to(victim)
    got = private_directory(tmp_path / "a-torch-trace")
    assert got.parent == tmp_path and got.name.startswith("a-torch-trace-") and not got.is_symlink()
    assert (got.stat().st_mode & 0o777) == 0o700
    theirs = tmp_path / "b-torch-trace"
    theirs.mkdir()
    _as_another_user(theirs, 0o777)
    assert private_directory(theirs) != theirs
    fresh = private_directory(tmp_path / "c-torch-trace")
    assert fresh == tmp_path / "c-torch-trace" and (fresh.stat().st_mode & 0o777) == 0o700
    assert private_directory(fresh) == fresh  # a second walk with the same report name
    assert list(victim.iterdir()) == []


def test_launch_env_puts_the_trace_in_a_private_folder_beside_the_report(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from fieldguide.walk.session import launch_env

    monkeypatch.delenv("TORCH_TRACE", raising=False)
    (tmp_path / "r-torch-trace").symlink_to(tmp_path)
    env = launch_env(SimpleNamespace(torch_trace=True), tmp_path / "r.json")  # type: ignore[arg-type]
    trace = Path(env["TORCH_TRACE"])
    assert trace.parent == tmp_path.resolve() and trace.is_dir() and not trace.is_symlink()
    assert trace.name.startswith("r-torch-trace-")


# --- issue 33 H1: the watch's report directory and its events file --------------------------------

def test_a_report_dir_that_is_a_link_others_may_write_or_not_ours_is_refused(tmp_path: Path) -> None:
    from fieldguide.errors import FieldguideError
    from fieldguide.frontends.watchline import prepare_report_dir

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with pytest.raises(FieldguideError, match="is a symbolic link"):
        prepare_report_dir(link)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(FieldguideError, match="may be written by others"):
        prepare_report_dir(shared)
    assert list(elsewhere.iterdir()) == [] and list(shared.iterdir()) == []
    mine = tmp_path / "mine"
    assert prepare_report_dir(mine) == mine and oct(mine.stat().st_mode & 0o777) == "0o700"
    assert prepare_report_dir(mine) == mine  # ours, private: used again
    assert list(mine.iterdir()) == []  # the write check leaves nothing


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand a directory to another user")
def test_another_users_directory_is_refused(tmp_path: Path) -> None:
    from fieldguide.errors import FieldguideError
    from fieldguide.frontends.watchline import prepare_report_dir

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(FieldguideError, match="belongs to another user"):
        prepare_report_dir(theirs)


def test_the_default_report_dir_cannot_be_guessed() -> None:
    from fieldguide.frontends.watchline import default_report_dir

    assert len({default_report_dir() for _ in range(20)}) == 20


def test_events_are_never_written_through_a_link_or_into_a_pipe(tmp_path: Path) -> None:
    import time

    from fieldguide.safewrite import append_line

    secret = tmp_path / "root-only"
    secret.write_text("keep")
    secret.chmod(0o600)
    (tmp_path / "events.jsonl").symlink_to(secret)
    with pytest.raises(OSError):
        append_line(tmp_path / "events.jsonl", "x\n")
    assert secret.read_text() == "keep"
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(OSError):
        append_line(fifo, "x\n")  # no reader: refused at once, never a hang
    assert time.monotonic() - started < 1.0
    append_line(tmp_path / "new.jsonl", "a\n")
    append_line(tmp_path / "new.jsonl", "b\n")
    assert (tmp_path / "new.jsonl").read_text() == "a\nb\n"
    assert oct((tmp_path / "new.jsonl").stat().st_mode & 0o777) == "0o600"
