"""fieldguide's end of the agent channel: a Unix socket in a private directory.

Each Python process of a launched target (ranks, spawned workers) connects on
its own; the one that reports training steps is the primary agent.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_STEPS_KEPT = 200_000


@dataclass
class AgentConnection:
    sock: socket.socket
    hello: dict[str, Any] = field(default_factory=dict)
    torch: dict[str, Any] = field(default_factory=dict)
    steps: collections.deque[list[Any]] = field(default_factory=lambda: collections.deque(maxlen=MAX_STEPS_KEPT))
    iters: list[dict[str, Any]] = field(default_factory=list)
    steps_total: int = 0
    connected_at: float = field(default_factory=time.monotonic)
    closed: bool = False

    @property
    def pid(self) -> int | None:
        return self.hello.get("pid")


class AgentServer:
    def __init__(self, directory: Path):
        self.path = directory / "agent.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._listener.listen(16)
        self._connections: list[AgentConnection] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._replies: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._closing = False
        threading.Thread(target=self._accept, name="fieldguide-agent-accept", daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            conn = AgentConnection(sock=sock)
            with self._lock:
                self._connections.append(conn)
            threading.Thread(target=self._read, args=(conn,), name="fieldguide-agent-read", daemon=True).start()

    def _read(self, conn: AgentConnection) -> None:
        buffer = b""
        while True:
            try:
                chunk = conn.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._changed:
                    conn.closed = True
                    self._changed.notify_all()
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                self._on_message(conn, message)

    def _on_message(self, conn: AgentConnection, message: dict[str, Any]) -> None:
        kind = message.get("type")
        with self._changed:
            if kind == "hello":
                conn.hello = message
            elif kind == "torch":
                conn.torch = message
            elif kind == "steps":
                conn.steps.extend(message["steps"])
                conn.steps_total += len(message["steps"])
            elif kind == "iters":
                conn.iters.extend(message["iters"])
            elif kind in ("reply", "error") and message.get("id") is not None:
                self._replies[message["id"]] = message
            self._changed.notify_all()

    # -- what probes use ----------------------------------------------------------
    def primary(self) -> AgentConnection | None:
        """The connection that reports steps (most of them), else the first to say hello."""
        with self._lock:
            live = [c for c in self._connections if c.hello]
            if not live:
                return None
            return max(live, key=lambda c: (c.steps_total, -c.connected_at))

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.2))
        return True

    def request(self, kind: str, timeout: float, **payload: Any) -> dict[str, Any]:
        """Send a request to the primary agent and wait for its reply."""
        conn = self.primary()
        if conn is None or conn.closed:
            return {"error": "the agent is not connected"}
        request_id = next(self._ids)
        data = (json.dumps({"type": kind, "id": request_id, **payload}) + "\n").encode()
        try:
            conn.sock.sendall(data)
        except OSError as err:
            return {"error": f"the agent channel is closed: {err.strerror}"}
        if not self.wait_for(lambda: request_id in self._replies or conn.closed, timeout):
            return {"error": f"no reply from the agent within {timeout:.0f} s"}
        with self._lock:
            return self._replies.pop(request_id, {"error": "the target exited before it replied"})

    def close(self) -> None:
        self._closing = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept thread
        except OSError:
            pass
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            for conn in self._connections:
                try:
                    conn.sock.close()
                except OSError:
                    pass
