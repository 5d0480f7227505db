"""The consoles fieldguide prints on. On a terminal, Rich's own, at the terminal's width. Off one
(a pipe, a file, a CI log), nothing is hard-wrapped or padded: each line is as long as its text,
so `fieldguide explain X | grep` and a pasted log read like the text itself."""

from __future__ import annotations

import sys
from typing import IO

from rich.console import Console

OFF_TERMINAL_WIDTH = 10_000  # wide enough that Rich wraps nothing; trailing padding is stripped


class Unpadded:
    """A stream that writes whole lines with their trailing spaces removed (Rich pads table cells
    and lines to the console's width)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.stream.write(self._pending.rstrip(" "))
            self._pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()


def console(stderr: bool = False) -> Console:
    """A console for standard output (or error): Rich's own on a terminal, unwrapped and unpadded
    off one."""
    stream = sys.stderr if stderr else sys.stdout
    if _is_terminal(stream):
        return Console(stderr=stderr, highlight=False)
    return Console(file=Unpadded(stream), width=OFF_TERMINAL_WIDTH, highlight=False, soft_wrap=False)  # type: ignore[arg-type]


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
