"""Reading playbook files that may come from anyone: bounded, and every failure one line.

A playbook directory ($FIELDGUIDE_PLAYBOOKS) is the user's: it may hold a FIFO, a directory
named x.yaml, an unreadable or binary file, or a path too long for the OS. None of these may
hang, crash or print a traceback; each becomes a PlaybookError (BadInput: exit 2).
"""

from __future__ import annotations

import errno
import importlib.resources
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from fieldguide.errors import BadInput
from fieldguide.playbook.yamlread import LineDict, read_yaml

# The bundled playbooks are under 40 kB; a megabyte is far more than any tree needs, and bounds
# what a hostile file costs to parse and validate.
MAX_FILE_BYTES = 1 << 20
# Paths are shown whole in messages up to this; longer ones are shortened (still one line).
_SHOWN_PATH_CHARS = 160


def one_line(text: str) -> str:
    """`text` with newlines and control characters escaped: a message stays one line, and a
    file's content or name cannot move the terminal's cursor."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(path: Path | str) -> str:
    text = str(path)
    if len(text) <= _SHOWN_PATH_CHARS:
        return text
    half = _SHOWN_PATH_CHARS // 2
    return f"{text[:half]}...{text[-half:]} ({len(text)} characters)"


class PlaybookError(BadInput):
    """A malformed playbook: `file:line: node X: field Y: problem`."""

    def __init__(self, path: Path | str, line: int, problem: str, *, node: str | None = None, field: str | None = None):
        where = f"{shown(path)}:{line}" if line else shown(path)
        parts = [where]
        if node:
            parts.append(f"node {node}")
        if field:
            parts.append(f"field {field}")
        super().__init__(one_line(": ".join(parts) + f": {problem}"))
        self.path, self.line, self.node, self.field = Path(path), line, node, field


def os_problem(err: OSError) -> str:
    if err.errno == errno.ENAMETOOLONG:
        return "the path is too long for this system"
    return err.strerror or str(err)


def is_file(path: Path) -> bool:
    """Path.is_file, but False (not OSError) for a path too long or otherwise unstat-able."""
    try:
        return path.is_file()
    except (OSError, ValueError):  # ENAMETOOLONG, EACCES on a parent; an embedded NUL
        return False


def yaml_files(directory: Path, problems: list[str] | None = None) -> list[Path]:
    """The *.yaml entries of a directory, sorted; one that cannot be listed is skipped (named in
    `problems`, when given; a directory that does not exist is not a problem)."""
    try:
        with os.scandir(directory) as entries:
            names = sorted(e.name for e in entries if e.name.endswith(".yaml"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        if problems is not None:
            problem = os_problem(err) if isinstance(err, OSError) else str(err)
            problems.append(one_line(f"{shown(directory)}: cannot list the playbook directory: {problem}"))
        return []
    return [directory / name for name in names]


def read_text(path: Path) -> str:
    """A playbook file's text, refused before parsing when it is not a regular file, larger than
    MAX_FILE_BYTES, or not UTF-8. O_NONBLOCK: a FIFO named x.yaml must not hang the listing."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as err:
        raise PlaybookError(path, 0, f"cannot read: {os_problem(err)}") from None
    except ValueError as err:  # an embedded NUL
        raise PlaybookError(path, 0, f"cannot read: {err}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise PlaybookError(path, 0, "cannot read: it is a directory, not a playbook file")
        if not stat.S_ISREG(info.st_mode):
            raise PlaybookError(path, 0, "cannot read: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise PlaybookError(path, 0, f"cannot read: {info.st_size} bytes, more than a playbook may "
                                f"be ({MAX_FILE_BYTES} bytes)")
        with os.fdopen(fd, "rb") as file:
            fd = -1  # the file object closes it now
            data = file.read(MAX_FILE_BYTES + 1)  # the file may have grown since fstat
    except OSError as err:
        raise PlaybookError(path, 0, f"cannot read: {os_problem(err)}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise PlaybookError(path, 0, f"cannot read: more than a playbook may be ({MAX_FILE_BYTES} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise PlaybookError(path, line, f"not UTF-8 text (byte {err.start})") from None


WATCH_FILE = "watch.yaml"  # the watch's rules (fieldguide/watch/rules.py), beside the playbooks but not one


def playbook_dirs() -> list[Path]:
    """Where playbooks are found: $FIELDGUIDE_PLAYBOOKS (colon-separated), then the built-ins."""
    dirs = [Path(p) for p in os.environ.get("FIELDGUIDE_PLAYBOOKS", "").split(os.pathsep) if p]
    packaged = importlib.resources.files("fieldguide") / "_playbooks"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    else:  # a source checkout or an editable install: the top-level playbooks/
        dirs.append(Path(__file__).resolve().parents[3] / "playbooks")
    return dirs


def read_playbook_file(path: Path) -> Any:
    text = read_text(path)
    try:
        return read_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and context_mark is not None:
            problem += f" ({context.removeprefix('while ')} on line {context_mark.line + 1})"
        raise PlaybookError(path, mark.line + 1 if mark else 0, f"bad YAML: {problem}") from None


def text_field(data: LineDict, key: str, path: Path, node: str | None, *, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        problem = "is missing" if key not in data else "must be non-empty text"
        raise PlaybookError(path, data.line_of(key), problem, node=node, field=key)
    return value.strip()


def check_fields(data: LineDict, allowed: set[str], path: Path, node: str | None) -> None:
    for key in data:
        if key not in allowed:
            raise PlaybookError(path, data.line_of(key), f"unknown field; allowed: {', '.join(sorted(allowed))}",
                                node=node, field=str(key))
