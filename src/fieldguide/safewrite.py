"""Writing a file the user named, safely when fieldguide runs as root in a shared directory.

A regular file (or a new one) is written to a temporary file with an unpredictable name in the
same directory, created exclusively (O_EXCL: a symlink planted there is never followed), then
renamed over the target: a reader never sees half a file. Anything else that exists under the name
(a character device such as /dev/stdout or /dev/full, a FIFO) is written in place, never replaced
by a rename.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> Path:
    """Write `text` to `path` (UTF-8); OSError as the operating system reports it."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        with open(path, "w", encoding="utf-8") as out:  # a device or a pipe: written, not replaced
            out.write(text)
        return path
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
