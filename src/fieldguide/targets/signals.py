"""Signals that end a walk, held back while a job is started or ended."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

# What ends a walk (cli._Interrupts): held back while a job is started or ended, delivered after.
_ENDING_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


@contextlib.contextmanager
def ending_signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done, then reach their own handlers
    (only the main thread gets them).

    Held in Python, not with the signal mask: a child inherits the mask across fork and exec,
    and a job started with them blocked could not be ended cleanly (it sat out 3 s of SIGINT and
    3 s of SIGTERM until SIGKILL)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    # (A handler not set from Python reads None and cannot be put back: left alone.)
    previous = {sig: h for sig in _ENDING_SIGNALS if (h := signal.getsignal(sig)) is not None}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)  # to the handler it was meant for, now that the block is done
