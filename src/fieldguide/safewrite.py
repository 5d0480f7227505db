"""Writing a file the user named, safely when fieldguide runs as root in a shared directory.

The file is written to a temporary file with an unpredictable name in the same directory, created
exclusively (O_EXCL: a link planted there is never followed), then renamed over the target: a
reader never sees half a file. A target that is a symbolic link, a device or anything else but a
regular file is refused (`refusal` says why, in one line): as root, `--report /dev/full` once
renamed a file over the device node.
"""

from __future__ import annotations

import os
import stat
import tempfile
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
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link; give the file itself"
    if stat.S_ISDIR(mode):
        return f"{path} is a directory"
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file (a device or a pipe); give a file path"
    return None


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` (UTF-8); UnsafePath for a path `refusal` refuses, else OSError as
    the operating system reports it."""
    path = Path(path)
    why = refusal(path)
    if why is not None:
        raise UnsafePath(why)
    try:
        mode: int | None = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        if mode is not None:
            os.chmod(tmp, stat.S_IMODE(mode))  # keep the replaced file's permissions
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
