"""fieldguide's end of the agent channel: a Unix socket in a private directory.

Each Python process of a launched target (ranks, spawned workers) connects on
its own; the one that reports training steps is the primary agent. One client
call, `request(capability, params, timeout)`, asks a capability of the primary
agent and returns an AgentReply: a reply always carries its request's id, so a
failure ends the wait at once instead of running out the timeout.
"""

from __future__ import annotations

import collections
import contextlib
import hmac
import itertools
import json
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOL = 3  # the agent's hello says which it speaks (inside/core.py); 3: profiles come as traces
MAX_STREAM_ITEMS = 200_000


@dataclass
class Stream:
    items: collections.deque[Any] = field(default_factory=lambda: collections.deque(maxlen=MAX_STREAM_ITEMS))
    total: int = 0  # items ever received (the deque keeps the latest)


@dataclass
class AgentReply:
    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class AgentConnection:
    sock: socket.socket
    hello: dict[str, Any] = field(default_factory=dict)
    torch: dict[str, Any] = field(default_factory=dict)
    streams: dict[tuple[str, str], Stream] = field(default_factory=dict)
    hook_failures: list[dict[str, Any]] = field(default_factory=list)
    agent_errors: list[str] = field(default_factory=list)
    connected_at: float = field(default_factory=time.monotonic)
    closed: bool = False
    closed_at: float | None = None
    rejected: bool = False  # its hello lacked the launch's token: not the job's agent
    # What the last op profile saw of anomaly mode (analysis/optrace.anomaly_seen), for torch.flags.
    op_profile_checks: dict[str, Any] | None = None

    @property
    def pid(self) -> int | None:
        return self.hello.get("pid")

    @property
    def rank(self) -> int | None:
        """This process's RANK in a multi-rank job (torchrun, srun, or a job that started its own
        ranks and called init_process_group), None outside one."""
        identity = self.identity
        try:
            return int(identity["RANK"]) if int(identity.get("WORLD_SIZE", "1")) > 1 else None
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def world_size(self) -> int:
        try:
            return max(int(self.identity.get("WORLD_SIZE", "1")), 1)
        except (TypeError, ValueError):
            return 1

    @property
    def identity(self) -> dict[str, Any]:
        """The rank's place in its job as the agent last told it (collectives.job_identity)."""
        told = self.streams.get(("collectives", "identity"))
        if told is not None and told.items:
            return dict(told.items[-1])
        return dict(self.hello.get("rank") or {})

    @property
    def capabilities(self) -> dict[str, dict[str, list[str]]]:
        return self.hello.get("capabilities") or {}

    def stream(self, capability: str, name: str) -> Stream:
        return self.streams.setdefault((capability, name), Stream())

    # The loop capability's streams, which most probes read.
    @property
    def steps(self) -> collections.deque[list[Any]]:
        return self.stream("loop", "steps").items

    @property
    def steps_total(self) -> int:
        return self.stream("loop", "steps").total

    @property
    def iters(self) -> list[dict[str, Any]]:
        return list(self.stream("loop", "iters").items)

    def failures_of(self, capability: str) -> list[str]:
        """Hooks of a capability that did not install, and any failure of the agent itself."""
        own = [f"{f.get('hook')}: {f.get('error')}" for f in self.hook_failures if f.get("capability") == capability]
        return own + [f"agent: {e}" for e in self.agent_errors]

    def exception(self) -> dict[str, Any] | None:
        """The uncaught exception that ended the job (the main thread's), if the agent saw one."""
        events = [e for e in self.stream("lifecycle", "events").items if e.get("event") == "exception"]
        main = [e for e in events if e.get("thread") == "main"]
        return (main or events or [None])[-1]

    def saw_exit(self) -> bool:
        return any(e.get("event") == "exit" for e in self.stream("lifecycle", "events").items)


class AgentServer:
    """The socket the job's agents connect to. Its directory is private (0700) and the socket 0600;
    on top of that an agent's hello must carry `token`, which the launch hands only to its job
    (FIELDGUIDE_AGENT_TOKEN): another client of the same user cannot pose as the job's agent."""

    def __init__(self, directory: Path):
        self.path = directory / "agent.sock"
        self.token = secrets.token_hex(16)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(str(self.path))
            os.chmod(self.path, 0o600)
            self._listener.listen(16)
        except OSError:
            self._listener.close()
            raise
        self._connections: list[AgentConnection] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._replies: dict[int, dict[str, Any]] = {}
        self._ids = itertools.count(1)
        self._closing = False
        self.preferred_pid: int | None = None
        self._threads: list[threading.Thread] = []
        self._start(self._accept, "fieldguide-agent-accept")

    def _start(self, target: Any, name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            conn = AgentConnection(sock=sock)
            with self._lock:
                self._connections.append(conn)
            self._start(self._read, "fieldguide-agent-read", conn)

    def _read(self, conn: AgentConnection) -> None:
        pieces: list[bytes] = []  # of a line not yet ended (a profile's trace is megabytes on one line)
        while True:
            try:
                chunk = conn.sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._changed:
                    conn.closed = True
                    conn.closed_at = time.monotonic()
                    self._changed.notify_all()
                return
            pieces.append(chunk)
            if b"\n" not in chunk:
                continue
            *lines, rest = b"".join(pieces).split(b"\n")
            pieces = [rest] if rest else []
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self._on_message(conn, message)

    def _on_message(self, conn: AgentConnection, message: dict[str, Any]) -> None:
        kind = message.get("type")
        with self._changed:
            if kind == "hello":
                if not hmac.compare_digest(str(message.get("token", "")), self.token):
                    conn.rejected = True
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)  # its reader sees the end
                    return
                message.pop("token", None)
                conn.hello = message
            elif not conn.hello:
                return  # an agent says hello first: nothing before it is believed
            elif kind == "torch":
                conn.torch = message
            elif kind == "stream":
                stream = conn.stream(str(message.get("capability")), str(message.get("name")))
                items = message.get("items") or []
                stream.items.extend(items)
                stream.total += len(items)
            elif kind == "hook_failed":
                conn.hook_failures.append(message)
            elif kind == "agent_error":
                conn.agent_errors.append(str(message.get("error")))
            elif kind == "reply" and message.get("id") is not None:
                self._replies[message["id"]] = message
            self._changed.notify_all()

    # -- what probes use ----------------------------------------------------------
    def primary(self) -> AgentConnection | None:
        """The connection the walk measures: a rank chosen by `prefer` (the slowest of a multi-rank
        job) while it is connected, else the one that reports steps (most of them), else the first
        to say hello."""
        with self._lock:
            live = [c for c in self._connections if c.hello]
            if not live:
                return None
            chosen = [c for c in live if self.preferred_pid is not None and c.pid == self.preferred_pid and not c.closed]
            if chosen:
                return chosen[0]
            return max(live, key=lambda c: (c.steps_total, -c.connected_at))

    def snapshot(self, conn: AgentConnection, capability: str, name: str,
                 since: int = 0) -> tuple[int, list[Any]]:
        """A stream's count of items ever received and the items kept after the first `since`,
        taken together (the reader thread extends streams under this lock). Only the new items
        are copied: a watch polls every second for hours, and the stream keeps up to
        MAX_STREAM_ITEMS."""
        with self._lock:
            stream = conn.stream(capability, name)
            fresh = min(max(stream.total - since, 0), len(stream.items))
            return stream.total, list(itertools.islice(reversed(stream.items), fresh))[::-1]

    def prefer(self, pid: int | None) -> None:
        """Measure this process from now on (a rank of the job), or None for the default."""
        self.preferred_pid = pid

    def ranks(self) -> list[AgentConnection]:
        """The connections of a multi-rank job's ranks, by rank (one per rank: the latest to connect)."""
        with self._lock:
            by_rank = {c.rank: c for c in sorted(self._connections, key=lambda c: c.connected_at)
                       if c.hello and c.rank is not None}
        return [by_rank[r] for r in sorted(by_rank) if r is not None]

    def wait_for(self, predicate: Any, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.2))
        return True

    def request(self, capability: str, params: dict[str, Any] | None = None, timeout: float = 10.0,
                name: str | None = None) -> AgentReply:
        """Ask the primary agent's capability (its only request, unless `name` says which)."""
        conn = self.primary()
        if conn is None or conn.closed:
            return AgentReply(False, error="the agent is not connected")
        if conn.hello.get("protocol") != PROTOCOL:
            return AgentReply(False, error=f"the agent speaks protocol {conn.hello.get('protocol')}, "
                                           f"fieldguide {PROTOCOL}")
        offered = conn.capabilities.get(capability)
        if offered is None:
            return AgentReply(False, error=f"this agent cannot do {capability} "
                                           f"(it can: {', '.join(sorted(conn.capabilities)) or 'nothing'})")
        requests = offered.get("requests") or []
        name = name or (requests[0] if len(requests) == 1 else None)
        if name not in requests:
            return AgentReply(False, error=f"the agent's {capability} answers no request {name!r}")
        request_id = next(self._ids)
        data = (json.dumps({"type": "request", "id": request_id, "capability": capability, "name": name,
                            "params": params or {}}) + "\n").encode()
        try:
            conn.sock.sendall(data)
        except OSError as err:
            return AgentReply(False, error=f"the agent channel is closed: {err.strerror}")
        if not self.wait_for(lambda: request_id in self._replies or conn.closed, timeout):
            return AgentReply(False, error=f"no reply from the agent within {timeout:.0f} s")
        with self._lock:
            reply = self._replies.pop(request_id, None)
        if reply is None:
            return AgentReply(False, error="the target exited before it replied")
        if not reply.get("ok"):
            return AgentReply(False, error=str(reply.get("error") or "the agent failed without a reason"))
        return AgentReply(True, result=reply.get("result") or {})

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
                    conn.sock.shutdown(socket.SHUT_RDWR)  # wakes its reader
                except OSError:
                    pass
                try:
                    conn.sock.close()
                except OSError:
                    pass
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2)
