"""Errors that end a command with a one-line message and a contract exit status."""

from __future__ import annotations

EXIT_CLEAN = 0
EXIT_DEPARTURE = 1
EXIT_BAD_INPUT = 2
EXIT_CANNOT_MEASURE = 3
EXIT_INTERRUPTED = 130
# A finished walk's exit status, by verdict (CONTRACT.md).
EXIT_FOR_VERDICT = {"clean": EXIT_CLEAN, "departure": EXIT_DEPARTURE, "inconclusive": EXIT_CANNOT_MEASURE}


class FieldguideError(Exception):
    """A failure the user can act on; `str(err)` is the whole message, one line."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None, detail: list[str] | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        # Extra lines shown under the message (e.g. a launched command's last output).
        self.detail = detail or []


class BadInput(FieldguideError):
    exit_code = EXIT_BAD_INPUT


class TargetFailed(FieldguideError):
    """The target could not be measured: it was not found, or it exited too early."""

    exit_code = EXIT_CANNOT_MEASURE
