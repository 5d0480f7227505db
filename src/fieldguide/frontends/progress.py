"""What a headless walk is doing while a probe measures: on a terminal a live status line on
stderr (the node, its probe's own status, seconds left of its window, the job's steps so far);
off a terminal a plain line at least every PLAIN_EVERY_S seconds. No Textual."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from fieldguide.walk.session import Session

PLAIN_EVERY_S = 5.0


class WalkProgress:
    """Probe threads `offer` readings; the waiting main thread `tick`s (every 0.2 s) and shows
    the latest reading of the current node's probes."""

    def __init__(self, err: Console, *, live: bool | None = None, plain_every: float = PLAIN_EVERY_S) -> None:
        self._err = err
        self._live_wanted = err.is_terminal if live is None else live
        self._live: Live | None = None
        self._lock = threading.Lock()
        self._latest: dict[str, dict[str, Any]] = {}  # by probe
        self._node: str | None = None
        self._node_since = time.monotonic()
        self._plain_every = plain_every
        self._last_plain = time.monotonic()

    def offer(self, reading: dict[str, Any]) -> None:
        """Called on a probe thread."""
        with self._lock:
            self._latest[str(reading.get("probe", ""))] = {**reading, "_at": time.monotonic()}

    def line(self, session: Session) -> str:
        """The status now: the node (or the job's start), what its probe says, the job's steps."""
        node = session.walk.current
        if node != self._node:
            self._node, self._node_since = node, time.monotonic()
        spec = session.playbook.nodes.get(node) if node is not None else None
        probes = {option.probe for option in spec.measure} if spec is not None else set()
        with self._lock:
            mine = [r for probe, r in self._latest.items() if probe in probes]
        reading = max(mine, key=lambda r: r["_at"]) if mine else {}
        took = time.monotonic() - self._node_since
        if node is None:
            return "ending the walk"
        if not session.walk.path and not reading:
            where = "starting: waiting for the job's first training steps"
        else:
            where = node
        parts = [f"{where} ({took:.0f} s)"]
        if reading.get("status"):
            parts.append(str(reading["status"]))
        elapsed, of = reading.get("elapsed"), reading.get("of")
        if isinstance(elapsed, (int, float)) and isinstance(of, (int, float)) and of > 0:
            since = time.monotonic() - reading["_at"]  # the probe reports now and then: count on from it
            parts.append(f"{max(of - elapsed - since, 0.0):.0f} s left of its {of:.0f} s window")
        steps = job_steps(session)
        if steps is not None:
            parts.append(f"job step {steps}")
        return " · ".join(parts)

    def tick(self, session: Session) -> None:
        """Called every 0.2 s on the main thread while the walk runs."""
        if self._live_wanted:
            from rich.text import Text

            text = Text(self.line(session), style="dim", overflow="ellipsis", no_wrap=True)
            if self._live is None:
                from rich.live import Live

                self._live = Live(text, console=self._err, transient=True, refresh_per_second=5)
                self._live.start()
            else:
                self._live.update(text)
            return
        now = time.monotonic()
        if now - self._last_plain >= self._plain_every:
            self._last_plain = now
            self._err.print(f"  ... {self.line(session)}", highlight=False, markup=False)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def job_steps(session: Session) -> int | None:
    """The launched job's training steps so far (its agent's count); None attached."""
    agent = getattr(session.target, "agent", None)
    conn = agent.primary() if agent is not None else None
    return int(conn.steps_total) if conn is not None else None
