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
