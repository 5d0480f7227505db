"""A stack window's recording: two py-spy samplers over a process and its workers (waiting and on
the CPU), ended and reaped on every path, and the raw texts a later window pools with."""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldguide.host.samplers import lower_priority, reap
from fieldguide.host.samplers import stop as stop_samplers
from fieldguide.host.watchdog import claim

STOP_GRACE_S = 3.0


def _stop(procs: Iterable[subprocess.Popen[str]], grace: float | None = None) -> None:
    """End and reap every sampler still running: SIGINT (py-spy writes what it has), then SIGKILL.

    Runs on every exit path (a finished window, cancel, an exception, Ctrl-C/SIGTERM) before
    the temporary directory goes, so no py-spy outlives the probe or writes into a deleted dir.
    """
    stop_samplers(procs, STOP_GRACE_S if grace is None else grace)


def record_stacks(spy: str, pid: int, seconds: float, rate: int, cancelled_wait: Any,
                  tick: Any = lambda: None, subprocesses: bool = True,
                  ) -> tuple[dict[str, str], dict[str, str], dict[str, int | None]]:
    """Two py-spy samplers on `pid` (and its subprocesses unless told not to: py-spy then stops
    polling for them, half its CPU) for `seconds`: "all" (`--idle`: waiting too) and "active"
    (on the CPU). Returns each one's raw text, stderr and exit status.
    `cancelled_wait(timeout)` returns True to cut the window short (py-spy then writes what it has)."""
    procs: dict[str, subprocess.Popen[str]] = {}
    with tempfile.TemporaryDirectory(prefix="fieldguide-spy-") as tmp:
        claim(Path(tmp))  # removed by a later run if this fieldguide is killed
        outputs = {kind: Path(tmp) / f"{kind}.txt" for kind in ("all", "active")}
        try:
            for kind, out in outputs.items():
                cmd = [spy, "record", "--pid", str(pid), "--rate", str(rate),
                       "--duration", str(math.ceil(seconds)), "--format", "raw",
                       "--threads", "--nonblocking", "--full-filenames", "--output", str(out)]
                if subprocesses:
                    cmd.append("--subprocesses")
                if kind == "all":
                    cmd.append("--idle")
                # stderr to a file: a pipe nobody reads while sampling could fill and stall py-spy.
                with open(Path(tmp) / f"{kind}.err", "w") as err:
                    procs[kind] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                                   env=dict(os.environ, RUST_BACKTRACE="0"))
                lower_priority(procs[kind].pid)
            # py-spy counts whole seconds from its own start: a window of 2.5 s is cut at its end
            # (SIGINT: it writes what it has); a whole number of seconds runs as py-spy times it.
            deadline = time.monotonic() + seconds if math.ceil(seconds) > seconds else float("inf")
            while any(reap(p) is None for p in procs.values()) and time.monotonic() < deadline:
                if cancelled_wait(min(0.2, max(deadline - time.monotonic(), 0.01))):
                    break  # _stop below sends SIGINT: py-spy writes what it has
                tick()
            _stop(procs.values())
            errors = {kind: (Path(tmp) / f"{kind}.err").read_text(errors="replace") for kind in procs}
            texts = {kind: out.read_text() if out.exists() else "" for kind, out in outputs.items()}
        finally:
            _stop(procs.values())
    return texts, errors, {kind: p.returncode for kind, p in procs.items()}


@dataclass(frozen=True)
class PooledTexts:
    """A stack window's raw py-spy texts and the seconds they cover: a later window adds to them."""

    texts: dict[str, str]
    seconds: float

    def add(self, texts: dict[str, str], seconds: float) -> PooledTexts:
        joined = {kind: _lines(self.texts.get(kind, "")) + _lines(text) for kind, text in texts.items()}
        return PooledTexts(joined, self.seconds + seconds)


def _lines(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
