"""fieldguide's in-process agent: step timing, data waits, torch state, op profiles.

Loaded by file path before the user's script runs (see bootstrap.py); uses only
the standard library until the script itself imports torch, then hooks:
- `torch.optim.optimizer.register_optimizer_step_post_hook`: a step ends when
  the first optimizer that ever stepped steps again (not patching
  Optimizer.step: subclasses override it);
- `_BaseDataLoaderIter.__next__` (the only __next__) and `DataLoader.__iter__`:
  time waiting for each batch, and each iterator's time to its first batch.
Records are batched and sent a few times a second as JSON lines over a Unix
socket from a daemon thread: the training thread only appends to deques (and
replies it prepares go to an outbox), so it never blocks on the socket.
The job runs the same with or without the agent: every hook swallows its own errors.
"""

import collections
import json
import os
import select
import socket
import sys
import threading
import time

_agent = None
FLUSH_SECONDS = 0.25
PR_SET_PTRACER = 0x59616D61


def _allow_ptrace_by(pid):
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


class Agent:
    def __init__(self, socket_path):
        self.pid = os.getpid()
        self.disabled = False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(socket_path)
        self.send_lock = threading.Lock()
        # Appended on the training thread, drained with popleft on the agent thread: both atomic.
        self.steps = collections.deque()  # [t_end, wall_s, data_wait_s, boundary]
        self.iters = collections.deque()  # one dict per DataLoader iterator, at its first batch
        self.outbox = collections.deque()  # replies prepared on the training thread
        self.last_boundary = None
        self.wait_acc = 0.0
        self.primary_optimizer = None
        self.step_count = 0
        self.state_requests = collections.deque()
        self.profile_request = None
        self.profiler = None
        self.profile_steps_left = 0
        self.profile_t0 = 0.0
        self.torch_hooked = False
        self.last_step_seen = time.monotonic()

    # -- the channel ------------------------------------------------------------
    def send(self, message):
        if self.disabled or os.getpid() != self.pid:
            return
        data = (json.dumps(message, default=str) + "\n").encode()
        with self.send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.disabled = True

    def hello(self):
        self.send({
            "type": "hello",
            "pid": self.pid,
            "ppid": os.getppid(),
            "argv": list(sys.argv),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "t": time.monotonic(),
        })

    def serve(self):
        buffer = b""
        while not self.disabled:
            try:
                ready, _, _ = select.select([self.sock], [], [], FLUSH_SECONDS)
            except (OSError, ValueError):
                return
            if ready:
                try:
                    chunk = self.sock.recv(65536)
                except OSError:
                    return
                if not chunk:  # fieldguide went away: stop costing anything
                    self.disabled = True
                    return
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        self.on_request(json.loads(line))
                    except Exception as err:
                        self.send({"type": "error", "error": repr(err)})
            self.flush()
            # A stalled loop never reaches a step hook: answer state requests from here.
            if self.state_requests and time.monotonic() - self.last_step_seen > 3.0:
                self.sample_state(from_thread="agent")
            if self.profile_request is not None and time.monotonic() > self.profile_request.get("_deadline", 1e18):
                request, self.profile_request = self.profile_request, None  # fieldguide stopped waiting
                self.send({"type": "reply", "id": request.get("id"), "error": "no training step came to profile"})

    @staticmethod
    def _drain(queue):
        items = []
        while queue:
            items.append(queue.popleft())
        return items

    def flush(self):
        steps = self._drain(self.steps)
        if steps:
            self.send({"type": "steps", "steps": steps})
        iters = self._drain(self.iters)
        if iters:
            self.send({"type": "iters", "iters": iters})
        for message in self._drain(self.outbox):
            self.send(message)
        if not self.torch_hooked and "torch" in sys.modules and hasattr(sys.modules["torch"], "optim"):
            self.hook_torch(sys.modules["torch"])  # a backstop if the import watcher never fired

    def on_request(self, request):
        kind = request.get("type")
        if kind == "state":
            self.state_requests.append(request.get("id"))
        elif kind == "profile":
            if self.profile_request is None and self.profiler is None:
                request["_deadline"] = time.monotonic() + float(request.get("timeout_s", 30))
                self.profile_request = request
            else:
                self.send({"type": "reply", "id": request.get("id"), "error": "a profile is already running"})

    # -- hooks on the training thread --------------------------------------------
    def boundary(self, kind):
        if self.disabled:
            return
        now = time.monotonic()
        self.last_step_seen = now
        if self.last_boundary is not None:
            self.steps.append([round(now, 6), round(now - self.last_boundary, 6), round(self.wait_acc, 6), kind])
        self.last_boundary = now
        self.wait_acc = 0.0
        self.step_count += 1
        if self.state_requests:
            self.sample_state(from_thread="training")
        if self.profile_request is not None or self.profiler is not None:
            self.profile_tick()

    def on_optimizer_step(self, optimizer, args, kwargs):
        try:
            if self.primary_optimizer is None:
                self.primary_optimizer = id(optimizer)
                self.last_boundary = None  # switch from batch boundaries to optimizer steps
            if id(optimizer) == self.primary_optimizer:
                self.boundary("o")
        except Exception:
            pass

    def hook_torch(self, torch):
        if self.torch_hooked:
            return
        self.torch_hooked = True
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(self.on_optimizer_step)
        except Exception:
            pass
        try:
            self.patch_dataloader()
        except Exception:
            pass
        self.outbox.append({"type": "torch", "torch": getattr(torch, "__version__", None),
                   "cuda": getattr(getattr(torch, "version", None), "cuda", None)})

    def patch_dataloader(self):
        from torch.utils.data import dataloader

        agent = self
        base_next = dataloader._BaseDataLoaderIter.__next__
        base_iter = dataloader.DataLoader.__iter__

        def __next__(it):
            t0 = time.monotonic()
            try:
                return base_next(it)
            finally:
                try:
                    t1 = time.monotonic()
                    agent.wait_acc += t1 - t0
                    if getattr(it, "_fieldguide_first", False):
                        it._fieldguide_first = False
                        agent.iters.append({
                            "t_start": round(it._fieldguide_t0, 6),
                            "first_batch_s": round(t1 - it._fieldguide_t0, 6),
                            "num_workers": it._fieldguide_workers,
                            "persistent_workers": it._fieldguide_persistent,
                            "iterator": type(it).__name__,
                        })
                    if agent.primary_optimizer is None:
                        agent.boundary("b")
                except Exception:
                    pass

        def __iter__(loader):
            t0 = time.monotonic()
            it = base_iter(loader)
            try:
                agent.wait_acc += time.monotonic() - t0
                it._fieldguide_t0 = t0
                it._fieldguide_first = True
                it._fieldguide_workers = getattr(loader, "num_workers", 0)
                it._fieldguide_persistent = bool(getattr(loader, "persistent_workers", False))
            except Exception:
                pass
            return it

        __next__.__wrapped__ = base_next
        __iter__.__wrapped__ = base_iter
        dataloader._BaseDataLoaderIter.__next__ = __next__
        dataloader.DataLoader.__iter__ = __iter__

    # -- torch state ---------------------------------------------------------------
    def sample_state(self, from_thread):
        ids = self._drain(self.state_requests)
        state = {"sampled_on": from_thread, "step_count": self.step_count,
                 "cuda_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"),
                 "python": sys.version.split()[0], "torch_imported": "torch" in sys.modules}
        torch = sys.modules.get("torch")
        try:
            if torch is not None:
                state.update(_torch_state(torch))
        except Exception as err:
            state["error"] = repr(err)
        for request_id in ids:
            self.outbox.append({"type": "reply", "id": request_id, "state": state})

    # -- op profile ---------------------------------------------------------------
    def profile_tick(self):
        torch = sys.modules.get("torch")
        if torch is None:
            return
        if self.profiler is None:
            request, self.profile_request = self.profile_request, None
            if request is None:
                return
            if _profiler_enabled(torch):  # the job's own profiler is running: never fight it
                self.outbox.append({"type": "reply", "id": request.get("id"),
                                    "error": "a torch profiler is already active in the job"})
                return
            try:
                from torch.profiler import ProfilerActivity, profile

                activities = [ProfilerActivity.CPU]
                if torch.cuda.is_available() and torch.cuda.is_initialized():
                    activities.append(ProfilerActivity.CUDA)
                self.profiler = profile(activities=activities)
                self.profiler.__enter__()
                self.profiler._fieldguide_request = request
                self.profile_steps_left = int(request.get("steps", 5))
                self.profile_t0 = time.monotonic()
            except Exception as err:
                self.profiler = None
                self.outbox.append({"type": "reply", "id": request.get("id"), "error": f"torch.profiler failed: {err!r}"})
            return
        self.profile_steps_left -= 1
        if self.profile_steps_left > 0:
            return
        profiler, self.profiler = self.profiler, None
        wall = time.monotonic() - self.profile_t0
        request = profiler._fieldguide_request
        try:
            profiler.__exit__(None, None, None)
        except Exception as err:
            self.outbox.append({"type": "reply", "id": request.get("id"), "error": f"torch.profiler failed: {err!r}"})
            return
        # Reading the events is slow: do it off the training thread.
        threading.Thread(target=self.send_profile, args=(profiler, request, wall), daemon=True).start()

    def send_profile(self, profiler, request, wall):
        try:
            summary = _summarize_profile(profiler, int(request.get("steps", 5)), wall)
            self.send({"type": "reply", "id": request.get("id"), "profile": summary})
        except Exception as err:
            self.send({"type": "reply", "id": request.get("id"), "error": f"could not read the profile: {err!r}"})


def _profiler_enabled(torch):
    try:
        on = bool(torch._C._autograd._profiler_enabled())
    except Exception:
        on = False
    # The legacy profiler's Python-side flag is global, not per thread.
    return on or bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def _torch_state(torch):
    state = {"torch": getattr(torch, "__version__", None),
             "cuda": getattr(torch.version, "cuda", None)}
    try:
        state["anomaly_detection"] = bool(torch.is_anomaly_enabled())
    except Exception:
        state["anomaly_detection"] = None
    state["autograd_profiler"] = _profiler_enabled(torch)
    try:
        state["deterministic_algorithms"] = bool(torch.are_deterministic_algorithms_enabled())
    except Exception:
        state["deterministic_algorithms"] = None
    try:
        state["num_threads"] = torch.get_num_threads()
    except Exception:
        state["num_threads"] = None
    state["sync_debug_mode"] = None
    state["cuda_initialized"] = False
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda_initialized"] = True
            state["sync_debug_mode"] = int(torch.cuda.get_sync_debug_mode())
            state["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
    except Exception:
        pass
    return state


def _summarize_profile(profiler, steps, wall):
    """Ops per step, median op time, and the share of step time inside ops.

    "Ops" are the outermost aten:: calls (an op's own children are part of it);
    DataLoader time is taken out of the wall time so that input waits do not
    read as framework overhead.
    """
    events = profiler.events()
    outer = []
    loader_us = 0.0
    device_us = 0.0
    for event in events:
        name = event.name
        if name.startswith("enumerate(DataLoader)"):
            loader_us += event.cpu_time_total
            continue
        if getattr(event, "device_type", None) is not None and str(event.device_type).endswith("CUDA"):
            device_us += getattr(event, "device_time_total", 0.0) or 0.0
            continue
        if not name.startswith("aten::"):
            continue
        parent = event.cpu_parent
        nested = False
        while parent is not None:
            # Inside another op, or inside the DataLoader (collate, a num_workers=0 dataset):
            # loader time is taken out of the wall time, so its ops must not count either.
            if parent.name.startswith(("aten::", "enumerate(DataLoader)")):
                nested = True
                break
            parent = parent.cpu_parent
        if not nested:
            outer.append((name, event.cpu_time_total))
    durations = sorted(d for _, d in outer)
    op_us = sum(durations)
    compute_wall_us = max(wall * 1e6 - loader_us, 1.0)
    by_name = {}
    for name, d in outer:
        total, count = by_name.get(name, (0.0, 0))
        by_name[name] = (total + d, count + 1)
    top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:10]
    return {
        "steps": steps,
        "wall_s": wall,
        "ops": len(outer),
        "ops_per_step": len(outer) / max(steps, 1),
        "median_op_us": durations[len(durations) // 2] if durations else None,
        "op_time_fraction": min(op_us / compute_wall_us, 1.0),
        "loader_fraction": min(loader_us / max(wall * 1e6, 1.0), 1.0),
        "device_time_us": device_us or None,
        "top_ops": [{"op": n, "total_us": round(t, 1), "count": c} for n, (t, c) in top],
    }


class _TorchWatcher:
    """A meta path finder that hooks torch the moment its import finishes."""

    searching = False

    def find_spec(self, fullname, path=None, target=None):
        # Libraries probe with importlib.util.find_spec("torch") without importing it, so the
        # watcher stays until torch's module code has really run.
        if fullname != "torch" or self.searching:
            return None
        import importlib.util

        self.searching = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self.searching = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module
        watcher = self

        def exec_module(module):
            loader_exec(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            if _agent is not None:
                _agent.hook_torch(module)

        spec.loader.exec_module = exec_module
        return spec


def _disable_in_child():
    # A forked child (a DataLoader worker) shares our socket: it must never write to it.
    if _agent is not None:
        _agent.disabled = True
    tracer = os.environ.get("FIELDGUIDE_TRACER_PID")
    if tracer and tracer.isdigit():
        _allow_ptrace_by(int(tracer))  # Yama exceptions are not inherited across fork


def install():
    global _agent
    path = os.environ.get("FIELDGUIDE_AGENT_SOCKET")
    if not path or _agent is not None:
        return
    try:
        _agent = Agent(path)
    except OSError:
        return  # fieldguide is gone; run the job untouched
    tracer = os.environ.get("FIELDGUIDE_TRACER_PID")
    if tracer and tracer.isdigit():
        _allow_ptrace_by(int(tracer))
    os.register_at_fork(after_in_child=_disable_in_child)
    _agent.hello()
    threading.Thread(target=_agent.serve, name="fieldguide-agent", daemon=True).start()
    if "torch" in sys.modules:
        _agent.hook_torch(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchWatcher())
