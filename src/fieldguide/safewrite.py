"""Writing a file the user named, safely when fieldguide runs as root in a shared directory.

The file is written to a temporary file with an unpredictable name in the same directory, created
exclusively (O_EXCL: a link planted there is never followed), synced, then renamed over the
target: a reader never sees half a file, and a full disk leaves the old one as it was. A target that is a symbolic link, a device or anything else but a
regular file is refused (`refusal` says why, in one line): as root, `--report /dev/full` once
renamed a file over the device node.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path


class UnsafePath(OSError):
    """A path fieldguide will not write a file to; `str()` is the reason, one line."""

    def __str__(self) -> str:
        return str(self.args[0])


def refusal(path: Path) -> str | None:
    """Why `path` will not be written to, or None: a symbolic link, a directory, a device or a pipe."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:  # a name over NAME_MAX, a component that is a file: said, not raised
        return f"{path}: {err.strerror or err}"
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link; give the file itself"
    if stat.S_ISDIR(mode):
        return f"{path} is a directory"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file (a device or a pipe); give a file path"
    return None


# A new file's mode before the umask (what open() gives it); a replaced file keeps its own.
NEW_FILE_MODE = 0o666
_TRIES = 100


def _create_temporary(path: Path, mode: int) -> tuple[int, str]:
    """An exclusively created file beside `path` with an unpredictable name (what mkstemp does,
    with the mode given: mkstemp's is always 0600, which a new report should not be)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TRIES):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no unused temporary name beside {path}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _kept_mode(path: Path) -> int | None:
    """The permissions a replacement keeps: the old file's, when it is this user's own; without
    set-id and sticky bits. Another user's file (`diag.json` planted 0666 in /tmp for root to
    replace) gives None: the report is new, with the umask's mode."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    if info.st_uid != os.geteuid():
        return None
    return stat.S_IMODE(info.st_mode) & 0o777


def private_directory(path: Path) -> Path:
    """A directory at `path` for fieldguide's output that only this user can have written to:
    `path` itself when it is new (created 0700) or already this user's own real directory, not
    writable by others; else a new one beside it with an unpredictable suffix. A link or another
    user's directory planted at a name fieldguide derives from the report is never written into."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
        return path
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022:
        return path
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=path.parent))


def own_directory(path: Path) -> Path:
    """`path` as a directory only this user can write into: made (0700, exclusively) if missing;
    used if it is this user's own real directory that others cannot write; UnsafePath otherwise
    (a link, another user's directory, one others may write, a file)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
        return path
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(f"{path} is a symbolic link; give a directory of your own")
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafePath(f"{path} exists and is not a directory")
    if info.st_uid != os.geteuid():
        raise UnsafePath(f"{path} belongs to another user (uid {info.st_uid}); give a directory of your own")
    if info.st_mode & 0o022:
        raise UnsafePath(f"{path} may be written by others (mode {stat.S_IMODE(info.st_mode):o}); give a private one")
    return path


def check_writable(directory: Path) -> None:
    """OSError unless a file can be created in `directory`: one made exclusively under an
    unpredictable name, never through a link or a pipe planted there, then removed."""
    fd, tmp = _create_temporary(Path(directory) / ".fieldguide-write-check", 0o600)
    os.close(fd)
    os.unlink(tmp)


def append_line(path: Path, line: str) -> None:
    """Append one line to this user's own regular file at `path` (made 0600 if missing), never
    through a link, and never blocking on a pipe planted there (OSError for anything but a file)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise UnsafePath(f"{path} is not a regular file of this user's")
        _write_all(fd, line.encode("utf-8"))
    finally:
        os.close(fd)


def copy_file(source: Path, target: Path) -> Path:
    """Copy `source` to `target` as `write_text` writes: a new file made exclusively beside it under
    an unpredictable name, then renamed over it (a link planted at `target` is replaced, never
    followed). A target that already is the source is left as it is."""
    source, target = Path(source), Path(target)
    try:
        if os.path.samefile(source, target):
            return target
    except FileNotFoundError:
        pass
    def fill(fd: int) -> None:
        with open(source, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                _write_all(fd, chunk)

    _replace(target, 0o600, fill)
    return target


def _replace(path: Path, mode: int, fill: Callable[[int], None]) -> None:
    """A new file beside `path` (exclusive, unpredictable name, `mode`), filled by `fill(fd)`, synced
    and renamed over `path`; on any failure the temporary file is removed and `path` is untouched."""
    fd, tmp = _create_temporary(path, mode)
    try:
        try:
            fill(fd)
            os.fsync(fd)  # a full disk can show only here; renaming first would lose the old file
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` (UTF-8); UnsafePath for a path `refusal` refuses, else OSError as
    the operating system reports it (ENOSPC: the disk is full), with the temporary file removed
    and a file that was there untouched. A replaced file of this user's keeps its mode (0600
    stays 0600); a new one, or another user's replaced, gets the umask's."""
    path = Path(path)
    why = refusal(path)
    if why is not None:
        raise UnsafePath(why)
    mode = _kept_mode(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    def fill(fd: int) -> None:
        _write_all(fd, text.encode("utf-8"))
        if mode is not None:
            os.fchmod(fd, mode)

    # A replacement is 0600 until it has the old file's mode: never readable by more than it was.
    _replace(path, NEW_FILE_MODE if mode is None else 0o600, fill)
    return path
