"""The agent core: the channel to fieldguide, the dispatcher, the step bus.

Threads: the job's training thread runs the hooks and only appends to deques
(streams, the outbox); the agent thread drains them a few times a second, reads
requests and dispatches them. The training thread never writes the socket,
except once at exit to flush what is left.

Protocol (JSON lines):
  agent -> fieldguide: hello {protocol, capabilities, ...}; stream {capability, name, items};
    reply {id, ok, result | error}; hook_failed {capability, hook, error}; agent_error {error}
  fieldguide -> agent: request {id, capability, name, params}
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import pkgutil
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .capabilities.collectives import rank_identity
from .capability import Capability

PROTOCOL = 3
FLUSH_SECONDS = 0.25  # how often streams reach fieldguide; also the request latency
CUT_PASSES = 8  # passes over the queues for one consistent flush (see Agent.flush)
PR_SET_PTRACER = 0x59616D61


def allow_ptrace_by(pid: int) -> None:
    """Under Yama ptrace_scope=1 only ancestors may trace us; fieldguide's py-spy is not one.

    Declaring fieldguide (and so its children) our tracer keeps py-spy working
    without CAP_SYS_PTRACE. Harmless where Yama is absent.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0)
    except Exception:
        pass


def parse_arm(text: str) -> dict[str, frozenset[str]]:
    """"memory:history,loop" -> {"memory": {"history"}, "loop": {}}."""
    armed: dict[str, frozenset[str]] = {}
    for item in text.split(","):
        name, *options = [part.strip() for part in item.split(":")]
        if name:
            armed[name] = armed.get(name, frozenset()) | frozenset(o for o in options if o)
    return armed


def capability_classes() -> list[type[Capability]]:
    """Every capability module in capabilities/, each exposing `CAPABILITY`."""
    from . import capabilities

    found: list[type[Capability]] = []
    for info in sorted(pkgutil.iter_modules(capabilities.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{capabilities.__name__}.{info.name}")
        cls = getattr(module, "CAPABILITY", None)
        if cls is not None:
            found.append(cls)
    return found


class Agent:
    def __init__(self, sock: socket.socket) -> None:
        self.pid = os.getpid()
        self.disabled = False
        self.sock = sock
        self.send_lock = threading.Lock()
        self.outbox: collections.deque[dict[str, Any]] = collections.deque()
        # A reply made on another thread (the training thread's, a profile's) wakes the agent
        # thread at once instead of waiting out its FLUSH_SECONDS: a request's answer is not late.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self._streams: list[tuple[str, str, collections.deque[Any], Callable[[Any], Any] | None]] = []
        # Capabilities that want the next step boundaries (a pending request, a running profile).
        self.step_listeners: list[Capability] = []
        self.step_count = 0
        self.last_step_seen = time.monotonic()
        self.torch: ModuleType | None = None
        self.capabilities: dict[str, Capability] = {}
        for cls in capability_classes():
            try:
                self.capabilities[cls.name] = cls(self)
            except Exception as err:
                self.hook_failed(cls.name, "create", err)

    @classmethod
    def connect(cls, path: str) -> Agent:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return cls(sock)

    # -- what capabilities call ------------------------------------------------------
    def stream(self, capability: str, name: str,
               shape: Callable[[Any], Any] | None = None) -> collections.deque[Any]:
        """A deque the training thread appends to; its items reach fieldguide in order.

        `shape` (rounding, say) is applied on the agent's thread as the items are sent, so the
        training thread only appends."""
        queue: collections.deque[Any] = collections.deque()
        self._streams.append((capability, name, queue, shape))
        return queue

    def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self.outbox.append({"type": "reply", "id": request_id, "ok": True, "result": result})
        self.wake()

    def fail(self, request_id: Any, error: str) -> None:
        self.outbox.append({"type": "reply", "id": request_id, "ok": False, "error": error})
        self.wake()

    def wake(self) -> None:
        """Have the agent thread flush now (one byte in its pipe; a full pipe is awake already)."""
        try:
            os.write(self._wake_write, b"!")
        except OSError:
            pass

    def hook_failed(self, capability: str, hook: str, err: BaseException) -> None:
        self.outbox.append({"type": "hook_failed", "capability": capability, "hook": hook,
                            "error": f"{type(err).__name__}: {err}"})

    def boundary(self) -> None:
        """A training step ended (called by the loop capability on the training thread)."""
        self.step_count += 1
        self.last_step_seen = time.monotonic()
        if self.step_listeners:
            for capability in tuple(self.step_listeners):
                try:
                    capability.on_step()
                except Exception as err:
                    self.remove_step_listener(capability)
                    self.hook_failed(capability.name, "on_step", err)

    def add_step_listener(self, capability: Capability) -> None:
        if capability not in self.step_listeners:
            self.step_listeners = [*self.step_listeners, capability]

    def remove_step_listener(self, capability: Capability) -> None:
        self.step_listeners = [c for c in self.step_listeners if c is not capability]

    # -- start-up ----------------------------------------------------------------------
    def start(self) -> None:
        self.send({"type": "hello", "protocol": PROTOCOL, "token": os.environ.get("FIELDGUIDE_AGENT_TOKEN", ""),
                   "pid": self.pid, "ppid": os.getppid(),
                   "argv": list(sys.argv), "python": sys.version.split()[0], "executable": sys.executable,
                   "rank": rank_identity(),
                   "t": time.monotonic(), "capabilities": {
                       name: {"requests": list(c.requests), "streams": list(c.streams)}
                       for name, c in self.capabilities.items()}})
        self._each("start", lambda c: c.start())
        armed = parse_arm(os.environ.get("FIELDGUIDE_AGENT_ARM", ""))
        self._each("arm", lambda c: c.arm(armed[c.name]) if c.name in armed else None)

    def hook_torch(self, torch: ModuleType) -> None:
        if self.torch is not None:
            return
        self.torch = torch
        self.outbox.append({"type": "torch", "torch": getattr(torch, "__version__", None),
                            "cuda": getattr(getattr(torch, "version", None), "cuda", None)})
        self._each("torch hooks", lambda c: c.hook_torch(torch))

    def _each(self, hook: str, call: Callable[[Capability], None]) -> None:
        for capability in self.capabilities.values():
            try:
                call(capability)
            except Exception as err:
                self.hook_failed(capability.name, hook, err)

    # -- the channel ---------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        if self.disabled or os.getpid() != self.pid:
            return
        data = (json.dumps(message, default=str) + "\n").encode()
        with self.send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.disabled = True

    def serve(self) -> None:
        """The agent thread. It must never die: a failure is reported and the loop goes on."""
        buffer = b""
        while not self.disabled:
            try:
                buffer = self._serve_once(buffer)
            except Exception as err:
                try:
                    self.send({"type": "agent_error", "error": f"{type(err).__name__}: {err}"})
                except Exception:
                    pass
                time.sleep(FLUSH_SECONDS)

    def _serve_once(self, buffer: bytes) -> bytes:
        try:
            sock = self.sock.fileno()
            ready, _, _ = select.select([sock, self._wake_read], [], [], FLUSH_SECONDS)
        except (OSError, ValueError):
            self.disabled = True
            return buffer
        if self._wake_read in ready:
            try:
                os.read(self._wake_read, 4096)
            except OSError:
                pass
        if sock in ready:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:  # fieldguide went away: stop costing anything
                self.disabled = True
                return buffer
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                self.dispatch(line)
        self._each("tick", lambda c: c.tick())
        self.flush()
        if self.torch is None and "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
            self.hook_torch(sys.modules["torch"])  # a backstop if the import watcher never fired
        return buffer

    def dispatch(self, line: bytes) -> None:
        """One request to the capability it names; every failure is a reply carrying its id."""
        request_id = None
        try:
            request = json.loads(line)
            request_id = request.get("id")
            capability = self.capabilities.get(request.get("capability", ""))
            name = request.get("name") or ""
            if capability is None:
                self.fail(request_id, f"this agent has no capability {request.get('capability')!r} "
                                      f"(it has: {', '.join(sorted(self.capabilities))})")
            elif name not in capability.requests:
                self.fail(request_id, f"capability {capability.name!r} answers no request {name!r}")
            else:
                capability.on_request(name, request_id, request.get("params") or {})
        except Exception as err:
            self.fail(request_id, f"the agent could not handle the request: {type(err).__name__}: {err}")

    def flush(self) -> None:
        """Send what the training thread appended, as a cut it could have seen at one moment.

        Queues are drained one after another while the training thread goes on appending: a
        step row could be sent while the signal appended just before it (in a queue already
        drained) waits a tick. Passes repeat until one finds every queue empty, so whatever is
        sent, everything appended before it is sent with it (up to CUT_PASSES on a thread that
        never pauses)."""
        queues = [queue for _, _, queue, _ in self._streams] + [self.outbox]
        taken: list[list[Any]] = [[] for _ in queues]
        for _ in range(CUT_PASSES):
            moved = False
            for queue, items in zip(queues, taken, strict=True):
                while queue:
                    items.append(queue.popleft())
                    moved = True
            if not moved:
                break
        for (capability, name, _, shape), items in zip(self._streams, taken[:-1], strict=True):
            if shape is not None:
                items = [shape(item) for item in items]
            if items:
                self.send({"type": "stream", "capability": capability, "name": name, "items": items})
        for message in taken[-1]:
            self.send(message)
