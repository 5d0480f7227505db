"""Live readings from probe threads, collapsed before they reach the UI; and the TUI's own
CPU/RSS sampler of the target's process tree (read-only psutil, never a signal)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ReadingPump:
    """Probe threads `offer` readings as fast as they like; the UI is told once (`notify`)
    and `take`s the latest of each probe when it gets round to it. A burst becomes one update."""

    def __init__(self, notify: Callable[[], object]) -> None:
        self._notify = notify
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}
        self._output: list[str] = []
        self._pending = False
        self._seq = 0

    def offer(self, reading: dict[str, Any]) -> None:
        """Called on a probe thread."""
        probe = str(reading.get("probe", ""))
        with self._lock:
            self._seq += 1
            self._latest[probe] = {**self._latest.get(probe, {}), **reading, "_seq": self._seq}
            if self._pending:
                return
            self._pending = True
        self._notify()

    def offer_output(self, line: str) -> None:
        """A line of the launched job's output (called on the target's reader thread)."""
        with self._lock:
            self._output = (self._output + [line])[-3:]
            if self._pending:
                return
            self._pending = True
        self._notify()

    def take(self) -> tuple[dict[str, dict[str, Any]], list[str]]:
        """Called on the UI thread: the latest reading of each probe, and the last output lines."""
        with self._lock:
            self._pending = False
            return {k: dict(v) for k, v in self._latest.items()}, list(self._output)

    def reset(self) -> None:
        with self._lock:
            self._latest = {}


def sample_tree(pid: int, previous: dict[int, float], interval: float) -> tuple[float, float, int, float]:
    """One sample of a process tree: (main CPU %, children CPU %, number of children, RSS MiB).

    `previous` maps pid -> CPU seconds at the last sample and is updated in place.
    Raises psutil.NoSuchProcess when the main process is gone.
    """
    import psutil

    from fieldguide.probes.process import snapshot

    tree = snapshot(psutil.Process(pid))  # the same per-process reading as the process.cpu probe
    if pid not in tree:
        raise psutil.NoSuchProcess(pid)
    main = children = 0.0
    for each, reading in tree.items():
        pct = (reading["cpu"] - previous[each]) / interval * 100 if each in previous else 0.0
        if each == pid:
            main = pct
        else:
            children += pct
    previous.clear()
    previous.update({each: reading["cpu"] for each, reading in tree.items()})
    rss = sum(reading["rss"] for reading in tree.values()) / 2**20
    return max(main, 0.0), max(children, 0.0), len(tree) - 1, rss
