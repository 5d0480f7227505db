"""Loop timing: where each training step ends, and what it spent getting its next input.

A step boundary comes from the first signal the job gives, in this order:
- an optimizer step (`register_optimizer_step_post_hook`): a step ends when the first
  optimizer that ever stepped steps again, so GANs' several optimizers count once;
  LBFGS's `step(closure)` is one step, its closures counted inside it;
- else the end of each `backward()` (a wrapper on `torch.autograd.backward`, which
  `Tensor.backward` calls): hand-written updates.
A DataLoader batch alone is no step: a process that only runs forwards is not training.

The input phase runs from the end of each backward or optimizer step to the start of
the next forward: the first forward pre-hook after it. A global pre-hook finds the
outermost modules during the first steps, then per-module hooks on those replace it
(a global hook puts every module call on torch's slow path). The training thread's
own CPU time over the phase tells producing input (on-CPU) from waiting for it.
`DataLoader.__next__` is timed as before (wait, and the main thread's CPU in it).

Streams `steps` rows (rows.StepRow) and `iters` (one dict per DataLoader
iterator, at its first batch); reports hook state in `signals`. Answers
`input_stacks`: for a few seconds, samples the training thread's stack while it is in its
input phase (`sys._current_frames`, from a thread of its own, at jittered ticks), so the phase's
time can be told apart: producing input, or a checkpoint or a log write after the step. Taken
with the GIL, the samples land where the thread releases it: the whole step is read from
py-spy's window instead (probes/input_stacks.py says why).
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
import warnings
from types import ModuleType
from typing import Any

from ..capability import Capability
from ..rows import StepRow
from .cuda import cuda_in_use

BY_OPTIMIZER, BY_BACKWARD = "o", "k"
# Not judgements: how long the outermost modules are looked for, and how many forwards with
# no backward at all make a process one that serves rather than trains.
DISCOVERY_PHASES = 4
SERVING_FORWARDS = 200


MAX_FRAMES = 40


def _never() -> bool:
    return False


_is_compiling = _never  # torch.compiler.is_compiling once torch is here


def resolve_is_compiling() -> None:
    """torch.compiler is not yet an attribute of torch while torch's own import finishes."""
    global _is_compiling
    compiler = sys.modules.get("torch.compiler")
    if compiler is not None and hasattr(compiler, "is_compiling"):
        _is_compiling = compiler.is_compiling
MAX_SAMPLE_SECONDS = 60.0
MAX_SAMPLE_RATE = 100.0
# The sampler's budget: its own time on the GIL, as a share of the window (the training thread
# waits for the GIL meanwhile), and the samples past which more add nothing to the shares it reads.
SAMPLER_SHARE = 0.003
ENOUGH_SAMPLES = 400


def first_tensor_elements(args: Any) -> int | None:
    """Elements of the first tensor among a forward's arguments (one level into lists, tuples and
    dicts): the batch times its sequence length, so ranks handed uneven work can be told apart."""
    for value in args if isinstance(args, (list, tuple)) else (args,):
        if isinstance(value, dict):
            value = next(iter(value.values()), None)
        elif isinstance(value, (list, tuple)) and value:
            value = value[0]
        numel = getattr(value, "numel", None)
        if numel is not None and hasattr(value, "shape"):
            return int(numel())
    return None


def round_row(row: list[Any]) -> list[Any]:
    """Microseconds are plenty; rounded on the agent's thread, not the training thread's."""
    return [round(v, 6) if isinstance(v, float) else v for v in row]


def dynamo_has_compiled() -> bool:
    """torch.compile has converted a frame in this process (True when that cannot be read)."""
    if "torch._dynamo" not in sys.modules:
        return False
    counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
    try:
        return counters is None or bool(counters["frames"]["total"])
    except Exception:
        return True


class LoopTiming(Capability):
    name = "loop"
    streams = ("steps", "iters", "signals")
    requests = ("input_stacks",)

    def start(self) -> None:
        self.steps = self.agent.stream(self.name, "steps", shape=round_row)
        self.iters = self.agent.stream(self.name, "iters")
        self.signals = self.agent.stream(self.name, "signals")
        self.last_boundary: float | None = None
        self.kind: str | None = None  # the signal that defines steps
        self.primary_optimizer: int | None = None
        self.in_optimizer_step = 0
        # Per step, reset at each boundary.
        self.loader_wait = self.loader_cpu = self.input_s = self.input_cpu = self.save_s = 0.0
        self.backwards = self.closures = self.forwards = 0
        self.batch_elements: int | None = None  # the first forward's first tensor: how much work a step got
        # The input phase.
        self.phase_t: float | None = None  # wall time the phase began, None outside one
        self.phase_cpu = 0.0
        self.phases_seen = 0
        # Seconds spent in input phases since the start (the op profile takes them out of its steps).
        self.phases_total_s = 0.0
        self.outer_modules: dict[int, Any] = {}
        self.global_hook: Any = None
        self.global_end_hook: Any = None
        self.depth = 0  # module calls in progress, while the global hooks are on
        self.backward_seen = False
        self.discovering = True  # looking for the outermost modules
        self.forwards_total = 0
        self.train_thread: int | None = None
        self.sampling = False

    def hook_torch(self, torch: ModuleType) -> None:
        for hook, install in (("optimizer step hooks", self.hook_optimizer), ("autograd.backward", self.wrap_backward),
                              ("module forward pre-hook", self.hook_forward), ("torch.save", self.wrap_save),
                              ("DataLoader __next__/__iter__", self.patch_dataloader)):
            try:
                install(torch)
            except Exception as err:
                self.agent.hook_failed(self.name, hook, err)

    # -- step boundaries (training thread: as little as possible) -------------------------
    def boundary(self, kind: str) -> None:
        if self.agent.disabled:
            return
        now = time.monotonic()
        if self.kind != kind:
            if self.kind == BY_OPTIMIZER:
                return  # an optimizer defines steps: backwards are not boundaries then
            self.kind, self.last_boundary = kind, None  # a better signal: start over with it
            self.signals.append({"boundary": kind, "t": now})
        if self.last_boundary is not None:
            self.steps.append(StepRow(now, now - self.last_boundary, self.loader_wait, kind,
                                      self.input_s if self.forwards else None, self.input_cpu, self.loader_cpu,
                                      self.backwards, self.closures, self.forwards, self.save_s,
                                      self.batch_elements))
        self.last_boundary = now
        self.batch_elements = None
        self.train_thread = threading.get_ident()
        self.loader_wait = self.loader_cpu = self.input_s = self.input_cpu = self.save_s = 0.0
        self.backwards = self.closures = self.forwards = 0
        self.agent.boundary()

    def begin_phase(self) -> None:
        self.phase_t = time.monotonic()
        self.phase_cpu = time.thread_time()

    def on_forward(self, module: Any, args: Any) -> None:
        """A forward pre-hook: the first after a phase began ends it."""
        if _is_compiling is _never:
            resolve_is_compiling()  # eager: the OptimizedModule's own call comes before any tracing
        if _is_compiling():
            # Traced by dynamo inside a compiled forward: a hook that touched our state there
            # would put guards on it, and every change of it would recompile the user's model.
            return
        try:
            outermost = self.depth == 0
            if self.global_end_hook is not None:
                self.depth += 1
            if self.phase_t is None:
                if self.discovering and not self.phases_seen and outermost and not self.backward_seen:
                    # Forward passes, not module calls: an LSTMCell stepped a thousand times inside
                    # one forward is one pass. An evaluation before training (nanoGPT's at iter 0)
                    # calls the same model: its modules are the ones to hook.
                    self.forwards_total += 1
                    self.outer_modules.setdefault(id(module), module)
                    if self.forwards_total >= SERVING_FORWARDS:
                        self.stop_discovery()  # forwards and never a backward: serving, not training
                return
            spent = time.monotonic() - self.phase_t
            self.input_s += spent
            self.phases_total_s += spent
            self.input_cpu += time.thread_time() - self.phase_cpu
            self.phase_t = None
            self.forwards += 1
            if self.batch_elements is None:
                self.batch_elements = first_tensor_elements(args)
            if self.discovering:
                self.outer_modules.setdefault(id(module), module)
                self.phases_seen += 1
                if self.phases_seen >= DISCOVERY_PHASES:
                    self.stop_discovery()
        except Exception:
            pass

    def hook_forward(self, torch: ModuleType) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        resolve_is_compiling()
        # torch.compile(module) warns of global hooks; this one is ours and returns at once there.
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there are global hooks")
        self.global_hook = register_module_forward_pre_hook(self.on_forward)
        try:
            from torch.nn.modules.module import register_module_forward_hook

            # The depth of module calls, so that only outermost calls count as forward passes.
            self.global_end_hook = register_module_forward_hook(self.on_forward_end, always_call=True)
        except TypeError:  # a torch without always_call: every module call counts, as before
            self.global_end_hook = None

    def on_forward_end(self, module: Any, args: Any, output: Any) -> None:
        if _is_compiling():
            return
        self.depth = max(self.depth - 1, 0)

    def stop_discovery(self) -> None:
        """The outermost modules are known: hook them alone, and drop the global hook.

        Not in a job that has compiled: dynamo guards on the hooks of the modules it traced, so
        moving hooks would recompile the user's model. The global hook stays there, and does
        nothing once discovery is over. (torch._dynamo being imported says nothing: the first
        optimizer step imports it in every job, and two global hooks on every module call cost
        a transformer's step more than the agent may.)"""
        self.discovering = False
        if not dynamo_has_compiled():
            handle, self.global_hook = self.global_hook, None
            end, self.global_end_hook = self.global_end_hook, None
            for h in (handle, end):
                if h is not None:
                    h.remove()
            self.depth = 0
            for module in self.outer_modules.values():
                module.register_forward_pre_hook(self.on_forward)
        self.signals.append({"outer_modules": [type(m).__name__ for m in self.outer_modules.values()],
                             "forwards_before_training": self.forwards_total if not self.phases_seen else 0})

    def on_backward_end(self) -> None:
        self.backwards += 1
        if not self.backward_seen:
            self.backward_seen = True  # training, whatever the forwards before it were
            self.signals.append({"first_backward": time.monotonic()})
        if self.in_optimizer_step:
            self.closures += 1
            return
        self.begin_phase()
        if self.kind != BY_OPTIMIZER:
            self.boundary(BY_BACKWARD)

    def wrap_backward(self, torch: ModuleType) -> None:
        base = torch.autograd.backward
        loop = self

        def backward(*args: Any, **kwargs: Any) -> Any:
            result = base(*args, **kwargs)  # a backward that raised ended no step
            try:
                loop.on_backward_end()
            except Exception:
                pass
            return result

        backward.__wrapped__ = base  # type: ignore[attr-defined]
        torch.autograd.backward = backward

    def wrap_save(self, torch: ModuleType) -> None:
        """Time inside torch.save is a checkpoint, not input: kept apart from the input phase."""
        base = torch.save
        loop = self

        def save(*args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            try:
                return base(*args, **kwargs)
            finally:
                loop.save_s += time.monotonic() - t0

        save.__wrapped__ = base  # type: ignore[attr-defined]
        torch.save = save  # type: ignore[attr-defined]

    def on_optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.in_optimizer_step += 1
        if self.backwards:
            # From a backward to the update (clipping, unscaling) is no input; a step that
            # begins before any backward (LBFGS: step(closure)) keeps its phase for the closure.
            self.phase_t = None

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self.in_optimizer_step = max(self.in_optimizer_step - 1, 0)
            self.begin_phase()
            if self.primary_optimizer is None:
                self.primary_optimizer = id(optimizer)
            if id(optimizer) == self.primary_optimizer:
                self.boundary(BY_OPTIMIZER)
        except Exception:
            pass

    def hook_optimizer(self, torch: ModuleType) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_optimizer_step_pre_hook(self.on_optimizer_pre)
        register_optimizer_step_post_hook(self.on_optimizer_step)

    # -- input-phase stacks (agent side) -------------------------------------------------------
    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        if self.sampling:
            self.agent.fail(request_id, "input stacks are already being sampled")
            return
        seconds = min(float(params.get("seconds", 6.0)), MAX_SAMPLE_SECONDS)
        rate = min(float(params.get("rate", 50.0)), MAX_SAMPLE_RATE)
        self.sampling = True
        threading.Thread(target=self.sample_input, args=(request_id, seconds, rate),
                         name="fieldguide-input-sampler", daemon=True).start()

    def sample_input(self, request_id: Any, seconds: float, rate: float) -> None:
        counts: collections.Counter[tuple[tuple[str, str, int], ...]] = collections.Counter()
        ticks = 0
        try:
            end = time.monotonic() + seconds
            jitter = random.Random()
            started = time.monotonic()
            held = 0.0  # seconds this thread ran Python, holding the GIL the training thread needs
            while time.monotonic() < end and not self.agent.disabled and sum(counts.values()) < ENOUGH_SAMPLES:
                # A fixed period locks onto a loop's own rhythm (a 28 ms micro-step against 20 ms
                # sleeps plus the wait for the GIL sampled only its tokenizer, never its backward).
                # The period stretches so that the samples' own time stays within SAMPLER_SHARE.
                period = max(1.0 / rate, held / SAMPLER_SHARE / max(ticks, 1))
                time.sleep(jitter.uniform(0.5, 1.5) * period)
                t_gil = time.perf_counter()
                ticks += 1
                thread = self.train_thread
                if self.phase_t is None or thread is None:
                    held += time.perf_counter() - t_gil
                    continue
                frame = sys._current_frames().get(thread)
                frames: list[tuple[str, str, int]] = []
                while frame is not None and len(frames) < MAX_FRAMES:
                    code = frame.f_code
                    frames.append((getattr(code, "co_qualname", code.co_name), code.co_filename, frame.f_lineno))
                    frame = frame.f_back
                del frame
                if self.phase_t is not None and frames:  # still in the phase after we looked
                    counts[tuple(reversed(frames))] += 1
                held += time.perf_counter() - t_gil
            self.agent.reply(request_id, {"stacks": [[[list(f) for f in k], n] for k, n in counts.most_common(200)],
                                          "in_phase": sum(counts.values()), "ticks": ticks,
                                          "seconds": round(time.monotonic() - started, 3),
                                          "held_s": round(held, 6),
                                          "cuda": cuda_in_use(sys.modules.get("torch"))})
        except Exception as err:
            self.agent.fail(request_id, f"input stacks failed: {type(err).__name__}: {err}")
        finally:
            self.sampling = False

    # -- DataLoader ---------------------------------------------------------------------------
    def patch_dataloader(self, torch: ModuleType) -> None:
        from torch.utils.data import dataloader

        loop = self
        base_next = dataloader._BaseDataLoaderIter.__next__
        base_iter = dataloader.DataLoader.__iter__

        def __next__(it: Any) -> Any:
            t0 = time.monotonic()
            c0 = time.thread_time()
            try:
                return base_next(it)
            finally:
                try:
                    t1 = time.monotonic()
                    loop.loader_wait += t1 - t0
                    loop.loader_cpu += time.thread_time() - c0
                    if it._fieldguide_first:
                        it._fieldguide_first = False
                        loop.iters.append({
                            "t_start": round(it._fieldguide_t0, 6),
                            "first_batch_s": round(t1 - it._fieldguide_t0, 6),
                            "num_workers": it._fieldguide_workers,
                            "persistent_workers": it._fieldguide_persistent,
                            "iterator": type(it).__name__,
                        })
                except Exception:
                    pass

        def __iter__(loader: Any) -> Any:
            t0 = time.monotonic()
            it = base_iter(loader)
            try:
                loop.loader_wait += time.monotonic() - t0
                it._fieldguide_t0 = t0  # type: ignore[attr-defined]
                it._fieldguide_first = True  # type: ignore[attr-defined]
                it._fieldguide_workers = getattr(loader, "num_workers", 0)  # type: ignore[attr-defined]
                it._fieldguide_persistent = bool(getattr(loader, "persistent_workers", False))  # type: ignore[attr-defined]
            except Exception:
                pass
            return it

        __next__.__wrapped__ = base_next  # type: ignore[attr-defined]
        __iter__.__wrapped__ = base_iter  # type: ignore[attr-defined]
        # An iterator made before the patch lacks our attributes: default them on the class.
        dataloader._BaseDataLoaderIter._fieldguide_first = False  # type: ignore[attr-defined]
        dataloader._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign,assignment]
        dataloader.DataLoader.__iter__ = __iter__  # type: ignore[method-assign]


CAPABILITY = LoopTiming
