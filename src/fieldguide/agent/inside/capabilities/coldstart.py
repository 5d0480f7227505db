"""The cold start: the moments a job passes on its way to training, on the system-wide monotonic clock.

Milestones (each once): `interpreter` (the agent loads from sitecustomize, so the interpreter is
up and the script about to run), `torch_import` (torch's import finished), `first_param` (the first
parameter registered on any module), `first_forward` (the first module call: a batch exists),
`first_step` (the first step boundary). Spans (each time it happens before steady training):
`cuda_init` (torch.cuda._lazy_init), `dist_init` (init_process_group), `checkpoint`
(torch.load), and `model_build`, from the first to the last parameter registered before the
first forward. Then the end of each of the first STEPS_KEPT steps, so fieldguide can tell when
steps settle. Until the first forward, the main thread's innermost line of the job's own code,
ten times a second (`where`), so that each phase is named for what happened in it. fieldguide's clock (time.monotonic) is the same clock: CLOCK_MONOTONIC is
system-wide on Linux, so the launcher's spawn time and these marks line up.
"""

from __future__ import annotations

import functools
import random
import sys
import threading
import time
from types import ModuleType
from typing import Any

from ..capability import Capability

STEPS_KEPT = 300  # step ends streamed; steady state is decided well within these
START_SAMPLE_S = 0.1  # the main thread's line sampled this often until the first forward
START_SAMPLE_MAX_S = 600.0
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "fieldguide/agent/inside/")


def where_now(frame: Any) -> str | None:
    """The innermost line of the job's own code in a stack: where its start-up spends the time."""
    while frame is not None:
        code = frame.f_code
        if not any(mark in code.co_filename for mark in _LIBRARY) and not code.co_filename.startswith("<"):
            return f"{getattr(code, 'co_qualname', code.co_name)} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
        frame = frame.f_back
    return None


class ColdStart(Capability):
    name = "coldstart"
    streams = ("marks",)

    def start(self) -> None:
        self.marks = self.agent.stream(self.name, "marks")
        self.seen: set[str] = set()
        self.param_hook: Any = None
        self.forward_hook: Any = None
        self.last_param: float | None = None
        self.first_param: float | None = None
        self.mark("interpreter", time.monotonic())
        self.agent.add_step_listener(self)
        threading.Thread(target=self.sample_start, args=(threading.main_thread().ident,),
                         name="fieldguide-start-sampler", daemon=True).start()

    def sample_start(self, main: int | None) -> None:
        """Until the first forward: which line of the job's code the main thread is at, so that a
        phase of the start is named for what happened in it (not for what usually does)."""
        jitter = random.Random()
        batch: list[list[Any]] = []
        began = last_sent = time.monotonic()
        try:
            while "first_forward" not in self.seen and time.monotonic() - began < START_SAMPLE_MAX_S \
                    and not self.agent.disabled:
                time.sleep(jitter.uniform(0.5, 1.5) * START_SAMPLE_S)
                frame = sys._current_frames().get(main) if main is not None else None
                where = where_now(frame)
                del frame
                now = time.monotonic()
                if where:
                    batch.append([round(now, 4), where])
                if batch and now - last_sent >= 2.0:
                    self.marks.append({"where": batch})
                    batch, last_sent = [], now
        except Exception:
            pass  # the job must run the same with or without us
        if batch:
            self.marks.append({"where": batch})

    def mark(self, name: str, t: float, **extra: Any) -> None:
        if name not in self.seen:
            self.seen.add(name)
            self.marks.append({"mark": name, "t": t, **extra})

    def span(self, name: str, start: float, end: float, **extra: Any) -> None:
        if self.agent.step_count < STEPS_KEPT:
            self.marks.append({"span": name, "t_start": start, "t_end": end, **extra})

    # -- torch's hooks --------------------------------------------------------------------
    def hook_torch(self, torch: ModuleType) -> None:
        self.mark("torch_import", time.monotonic())
        module_hooks = torch.nn.modules.module
        self.param_hook = module_hooks.register_module_parameter_registration_hook(self.on_parameter)
        self.forward_hook = module_hooks.register_module_forward_pre_hook(self.on_forward)
        self.wrap(torch, "load", "checkpoint")
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and hasattr(cuda, "_lazy_init") and not cuda.is_initialized():
            # C++ calls torch.cuda._lazy_init by attribute, as does torch.cuda itself: one wrapper sees both.
            self.wrap(cuda, "_lazy_init", "cuda_init", once=True)
        distributed = getattr(torch, "distributed", None)
        if distributed is not None and hasattr(distributed, "init_process_group"):
            self.wrap(distributed, "init_process_group", "dist_init")

    def wrap(self, owner: ModuleType, attribute: str, span: str, once: bool = False) -> None:
        original = getattr(owner, attribute)
        capability = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                capability.span(span, started, time.monotonic())
                if once:  # _lazy_init runs at every CUDA call: after the first, the original again
                    setattr(owner, attribute, original)

        setattr(owner, attribute, timed)

    def on_parameter(self, module: Any, name: str, param: Any) -> None:
        now = time.monotonic()
        if self.first_param is None:
            self.first_param = now
            self.mark("first_param", now)
        if "first_forward" not in self.seen:
            self.last_param = now
        return None

    def on_forward(self, module: Any, args: Any) -> None:
        # A global hook puts every module call on torch's slow path: gone after the first forward.
        compiler = sys.modules.get("torch.compiler")
        if compiler is not None and compiler.is_compiling():
            return None  # dynamo tracing a compiled function: never trace into us
        now = time.monotonic()
        self.mark("first_forward", now)
        self.drop_hooks()
        if self.first_param is not None and self.last_param is not None:
            self.span("model_build", self.first_param, self.last_param)
        return None

    def drop_hooks(self) -> None:
        for handle in (self.forward_hook, self.param_hook):
            if handle is not None:
                handle.remove()
        self.forward_hook = self.param_hook = None

    # -- steps ----------------------------------------------------------------------------
    def on_step(self) -> None:
        now = time.monotonic()
        count = self.agent.step_count
        if count == 1:
            self.mark("first_step", now)
        self.marks.append({"step": count, "t": now})
        if count >= STEPS_KEPT:
            self.agent.remove_step_listener(self)


CAPABILITY = ColdStart
