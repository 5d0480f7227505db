"""How the job ends: the uncaught exception (main thread or any other), and a last flush.

`sys.excepthook` and `threading.excepthook` record the exception's type, message
and the innermost frame of the job's own code; `atexit` gives every capability
its `on_exit` and flushes the channel from the exiting thread, so what was
measured before a crash reaches fieldguide. The exit code and a killing signal
are read by fieldguide from the process itself. The previous hooks always run.

A job that sets its own `sys.excepthook` after the agent replaces ours; its exception is still
read at exit from `sys.last_value`, which Python sets before it calls whatever hook there is.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from types import TracebackType
from typing import Any

from ..capability import Capability

MESSAGE_CHARS = 500
AGENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # our own wrappers are not the job's code


def describe_exception(exc_type: type[BaseException], exc: BaseException | None,
                       tb: TracebackType | None) -> dict[str, Any]:
    where = None
    for frame in reversed(traceback.extract_tb(tb) if tb is not None else []):
        if ("site-packages" not in frame.filename and "/lib/python" not in frame.filename
                and not frame.filename.startswith(AGENT_DIR)):
            where = f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"
            break
    return {"type": exc_type.__name__, "module": exc_type.__module__,
            "message": str(exc)[:MESSAGE_CHARS] if exc is not None else "", "where": where}


class Lifecycle(Capability):
    name = "lifecycle"
    streams = ("events",)

    def start(self) -> None:
        self.events = self.agent.stream(self.name, "events")
        self.ended = False
        self.reported = False  # the main thread's uncaught exception, through our hook
        previous_hook = sys.excepthook
        previous_thread_hook = threading.excepthook

        def excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            try:
                self.report_main(exc_type, exc, tb)
                self.finish()
            except Exception:
                pass
            previous_hook(exc_type, exc, tb)

        def thread_excepthook(args: Any) -> None:
            try:
                if args.thread is None or not args.thread.name.startswith("fieldguide-"):  # ours: reported apart
                    self.events.append({"event": "exception", "thread": getattr(args.thread, "name", "?"),
                                        "step_count": self.agent.step_count,
                                        **describe_exception(args.exc_type, args.exc_value, args.exc_traceback)})
            except Exception:
                pass
            previous_thread_hook(args)

        sys.excepthook = excepthook
        threading.excepthook = thread_excepthook
        atexit.register(self.finish)

    def report_main(self, exc_type: type[BaseException], exc: BaseException | None,
                    tb: TracebackType | None) -> None:
        self.reported = True
        self.events.append({"event": "exception", "thread": "main",
                            "step_count": self.agent.step_count, **describe_exception(exc_type, exc, tb)})
        self.tell_exception(exc)

    def tell_exception(self, exc: BaseException | None) -> None:
        if exc is None:
            return
        for capability in self.agent.capabilities.values():
            if capability is not self:
                try:
                    capability.on_exception(exc)
                except Exception as err:
                    self.agent.hook_failed(capability.name, "on_exception", err)

    def finish(self) -> None:
        """Once, as the job ends: every capability leaves what it has, then one flush."""
        if self.ended or os.getpid() != self.agent.pid:
            return
        self.ended = True
        last = getattr(sys, "last_value", None)
        if not self.reported and isinstance(last, BaseException) and not isinstance(last, SystemExit):
            self.report_main(type(last), last, getattr(sys, "last_traceback", None))  # the job's own hook ran instead
        for capability in self.agent.capabilities.values():
            if capability is not self:
                try:
                    capability.on_exit()
                except Exception as err:
                    self.agent.hook_failed(capability.name, "on_exit", err)
        self.events.append({"event": "exit", "step_count": self.agent.step_count})
        self.agent.flush()


CAPABILITY = Lifecycle
