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
