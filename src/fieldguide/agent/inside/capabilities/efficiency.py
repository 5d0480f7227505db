"""How the job does its arithmetic: the FLOPs of one step by dtype and device, the intra-op
threads it runs and where their number was set, and the precision switches (TF32, autocast).

`efficiency` request: {"count": true, "timeout_s": s} counts one whole step (from a step boundary
to the next) under a TorchDispatchMode that reads each op's FLOPs from torch's own formulas
(torch.utils.flop_counter's registry): the forward, the backward and the update. The mode costs
Python per op for that one step only, and is off before the reply. {"count": false}: the state
alone, at once. Where the thread count and float64 came from is recorded as the job sets them:
torch.set_num_threads, torch.set_default_dtype and Module.double/.to(float64) are wrapped to note
their caller's line (the wrappers call the originals, unchanged).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import ModuleType
from typing import Any

from ..callers import caller_line
from ..capability import Capability, expire_request

THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
SLOW_DTYPES = ("float64", "complex128")


class Efficiency(Capability):
    name = "efficiency"
    requests = ("efficiency",)

    def start(self) -> None:
        self.lock = threading.Lock()
        self.request: dict[str, Any] | None = None
        self.mode: Any = None
        self.t0 = 0.0
        self.env = {k: os.environ[k] for k in THREAD_VARS if k in os.environ}
        self.origins: dict[str, dict[str, Any]] = {}  # what: {"value", "at"}

    def hook_torch(self, torch: ModuleType) -> None:
        self._wrap(torch, "set_num_threads", "threads", lambda args: args[0] if args else None)
        self._wrap(torch, "set_default_dtype", "default_dtype",
                   lambda args: f"torch.set_default_dtype({args[0]})" if args else None)
        module = getattr(getattr(torch, "nn", None), "Module", None)
        if module is not None:
            self._wrap(module, "double", "float64", lambda args: "Module.double()")
            original_to = getattr(module.to, "_fieldguide_original", module.to)

            def to(this: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    wanted = kwargs.get("dtype") or next((a for a in args if isinstance(a, torch.dtype)), None)
                    if wanted is torch.float64 and "float64" not in self.origins:
                        self.origins["float64"] = {"value": "Module.to(torch.float64)", "at": caller_line()}
                except Exception:
                    pass
                return original_to(this, *args, **kwargs)

            to._fieldguide_original = original_to  # type: ignore[attr-defined]
            module.to = to

    def _wrap(self, owner: Any, attr: str, what: str, value_of: Any) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return
        # Hooked twice in one process (a second agent): wrap the function itself, not the wrapper.
        original = getattr(original, "_fieldguide_original", original)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                self.origins[what] = {"value": value_of(args[1:] if what == "float64" else args), "at": caller_line()}
            except Exception:
                pass
            return original(*args, **kwargs)

        wrapper._fieldguide_original = original  # type: ignore[attr-defined]
        try:
            setattr(owner, attr, wrapper)
        except (AttributeError, TypeError) as err:
            self.agent.hook_failed(self.name, attr, err)

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        if not params.get("count", True):
            self.agent.reply(request_id, self.state())
            return
        with self.lock:
            busy = self.request is not None or self.mode is not None
            if not busy:
                self.request = {"id": request_id, "deadline": time.monotonic() + float(params.get("timeout_s", 20))}
        if busy:
            self.agent.fail(request_id, "a FLOP count is already running")
        else:
            self.agent.add_step_listener(self)

    def tick(self) -> None:
        expire_request(self, "count", lambda: self.mode is not None)

    def on_step(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        if self.mode is None:
            with self.lock:
                request = self.request
            if request is None:
                self.agent.remove_step_listener(self)
                return
            try:
                self.mode = counting_mode(torch)
                self.mode.__enter__()
            except Exception as err:
                self.mode = None
                with self.lock:
                    self.request = None
                self.agent.remove_step_listener(self)
                self.agent.fail(request["id"], f"cannot count FLOPs here: {err!r}")
                return
            self.t0 = time.monotonic()
            return
        mode, self.mode = self.mode, None
        self.agent.remove_step_listener(self)
        try:
            mode.__exit__(None, None, None)
        except Exception:
            pass
        with self.lock:
            request, self.request = self.request, None
        if request is None:
            return
        self.agent.reply(request["id"], {**self.state(), "counted_s": time.monotonic() - self.t0,
                                         "flops": mode.flops, "ops": mode.ops, "uncounted": mode.uncounted})

    def state(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        # The thread variables now: a script may set them itself before importing torch.
        now = {k: os.environ[k] for k in THREAD_VARS if k in os.environ}
        found: dict[str, Any] = {"env": now, "env_set_by_job": sorted(k for k in now if self.env.get(k) != now[k]),
                                 "origins": dict(self.origins), "cpus": os.cpu_count()}
        try:
            found["affinity"] = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            found["affinity"] = None
        for key in ("LOCAL_WORLD_SIZE", "WORLD_SIZE", "LOCAL_RANK"):
            if key in os.environ:
                found[key.lower()] = os.environ[key]
        if torch is None:
            return found
        try:
            found["threads"] = torch.get_num_threads()
            found["interop_threads"] = torch.get_num_interop_threads()
            found["default_dtype"] = str(torch.get_default_dtype()).replace("torch.", "")
            found["matmul_precision"] = torch.get_float32_matmul_precision()
            found["autocast_cpu"] = autocast_on(torch, "cpu")
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                found["cuda_tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
                found["cudnn_tf32"] = bool(torch.backends.cudnn.allow_tf32)
                found["cuda_capability"] = list(torch.cuda.get_device_capability())
                found["cuda_device"] = torch.cuda.get_device_name()
        except Exception as err:
            found["state_error"] = repr(err)
        return found


def autocast_on(torch: ModuleType, device: str) -> bool | None:
    """Whether autocast is on for `device` (torch 2.4 on takes the device; before, a CPU-only call)."""
    try:
        return bool(torch.is_autocast_enabled(device))
    except TypeError:
        return bool(torch.is_autocast_cpu_enabled()) if device == "cpu" else None
    except Exception:
        return None


def counting_mode(torch: ModuleType) -> Any:
    """A TorchDispatchMode that adds up each op's FLOPs (torch's own formulas) by dtype and
    device, and counts the ops it has no formula for."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class FlopsByDtype(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.flops: dict[str, float] = {}  # "dtype device family" -> FLOPs (family: matmul, conv, attention)
            self.ops = 0
            self.uncounted = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            self.ops += 1
            formula = flop_registry.get(func._overloadpacket)
            if formula is None:
                return out
            try:
                flops = formula(*args, **kwargs, out_val=out)
                first = next(a for a in args if isinstance(a, torch.Tensor))
                name = str(func._overloadpacket)
                family = "conv" if "conv" in name else "attention" if "attention" in name else "matmul"
                key = f"{str(first.dtype).replace('torch.', '')} {first.device.type} {family}"
                self.flops[key] = self.flops.get(key, 0.0) + float(flops)
            except Exception:
                self.uncounted += 1
            return out

    return FlopsByDtype()


CAPABILITY = Efficiency
