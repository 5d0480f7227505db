"""Equivalence before speed: a compiled module against its eager original, on the job's own batch.

On the next call of a compiled module (`torch.compile(module)`, or `module.compile()`) the
call runs as the job made it, and then its eager original runs on a copy of the same inputs,
under `no_grad`, from the same RNG state (put back afterwards) and with copies of the buffers
as they were before the call, swapped in for it alone (BatchNorm updates the copies; the job's
own buffers are never written, not even with their own values: autograd counts in-place
writes): the job's training goes on exactly as it would have. Each output is compared with a tolerance for its dtype, relative to the output's
scale. Dropout and other random ops draw different numbers compiled (inductor's RNG) than
eager: with those active, the comparison says it cannot decide.
"""

from __future__ import annotations

import gc
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import Agent

# Largest |compiled - eager| allowed, as a fraction of the largest |eager| of that output.
TOLERANCE = {"float64": 1e-6, "float32": 1e-3, "float16": 1e-2, "bfloat16": 1.6e-2}
MAX_OUTPUTS = 16


def flatten(value: Any, name: str = "out") -> list[tuple[str, Any]]:
    """The tensors of an output, named by their path (out[0], out['logits'], out.loss)."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return [(name, value)]
    found: list[tuple[str, Any]] = []
    if isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            found += flatten(item, f"{name}[{i}]")
    elif isinstance(value, dict) or hasattr(value, "items"):
        try:
            for key, item in value.items():
                found += flatten(item, f"{name}[{key!r}]")
        except Exception:
            pass
    return found[:MAX_OUTPUTS]


def compare(compiled: Any, eager: Any) -> list[dict[str, Any]]:
    rows = []
    eager_by_name = dict(flatten(eager))
    for name, got in flatten(compiled):
        want = eager_by_name.get(name)
        dtype = str(got.dtype).removeprefix("torch.")
        row: dict[str, Any] = {"output": name, "dtype": dtype, "shape": list(got.shape)}
        if want is None or tuple(want.shape) != tuple(got.shape):
            row.update(ok=False, why="eager gave no output of this shape here")
        elif got.is_floating_point():
            a, b = got.detach().double(), want.detach().double()
            nan_differs = bool((a.isnan() != b.isnan()).any())
            diff = (a - b).nan_to_num(0.0).abs()
            max_abs = float(diff.max()) if diff.numel() else 0.0
            scale = float(b.nan_to_num(0.0).abs().max()) if b.numel() else 0.0
            rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
            tol = TOLERANCE.get(dtype, 1e-3)
            row.update(max_abs=max_abs, max_rel=rel, scale=scale, tolerance=tol, ok=rel <= tol and not nan_differs)
            if nan_differs:
                row["why"] = "NaN in one and not the other"
        else:
            differ = int((got.detach() != want.detach()).sum())
            row.update(differing=differ, ok=differ == 0, tolerance=0)
        rows.append(row)
    return rows


def compiled_modules() -> list[tuple[Any, str, Any]]:
    """(module, the attribute its compiled call lives in, its eager callable) for each compiled module."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    optimized = getattr(eval_frame, "OptimizedModule", None)
    found = []
    module_type = torch.nn.Module
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance: some objects' __class__ is a property that warns
        try:
            if optimized is not None and issubclass(kind, optimized):
                found.append((obj, "forward", obj._orig_mod))
            elif issubclass(kind, module_type) and obj.__dict__.get("_compiled_call_impl") is not None:
                found.append((obj, "_compiled_call_impl", obj._call_impl))
        except Exception:
            continue
    return found


def eager_root(module: Any) -> Any:
    """The module whose parameters and buffers the eager original uses."""
    return getattr(module, "_orig_mod", module)


def random_modules(module: Any) -> list[str]:
    torch = sys.modules["torch"]
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and getattr(inductor, "fallback_random", False):
        return []  # inductor then draws eager's numbers
    dropout = torch.nn.modules.dropout._DropoutNd
    return sorted({type(m).__name__ for m in module.modules() if isinstance(m, dropout) and m.training and m.p > 0})


def clone_inputs(value: Any) -> Any:
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(clone_inputs(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_inputs(v) for k, v in value.items()}
    return value


class RngState:
    """The CPU and (initialised) CUDA generators' state."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.cpu = torch.random.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def restore(self) -> None:
        self.torch.random.set_rng_state(self.cpu)
        if self.cuda is not None:
            self.torch.cuda.set_rng_state_all(self.cuda)


class EquivalenceCheck:
    def __init__(self, agent: Agent, request_id: Any, timeout_s: float) -> None:
        self.agent = agent
        self.request_id = request_id
        self.deadline = time.monotonic() + timeout_s
        self.done = False
        self.swapped: list[tuple[Any, str, Any, bool]] = []  # module, attribute, original, was it the instance's

    def arm(self) -> None:
        targets = compiled_modules()
        if not targets:
            self.finish(error="no compiled module found (torch.compile of a function, not a module, "
                              "has no eager original to compare with)")
            return
        for module, attribute, eager in targets:
            original = getattr(module, attribute)
            own = attribute in module.__dict__
            self.swapped.append((module, attribute, original, own))
            setattr(module, attribute, self.wrapper(module, original, eager))

    def restore(self) -> None:
        swapped, self.swapped = self.swapped, []
        for module, attribute, original, own in swapped:
            if own:
                setattr(module, attribute, original)
            else:
                module.__dict__.pop(attribute, None)

    def finish(self, result: dict[str, Any] | None = None, error: str | None = None) -> None:
        if self.done:
            return
        self.done = True
        self.restore()
        if error is not None:
            self.agent.fail(self.request_id, error)
        else:
            self.agent.reply(self.request_id, result or {})

    def tick(self) -> None:
        if not self.done and time.monotonic() > self.deadline:
            self.finish(error="no call of a compiled module came to check")

    def wrapper(self, module: Any, original: Any, eager: Any) -> Any:
        check = self

        def checked(*args: Any, **kwargs: Any) -> Any:
            if check.done:
                return original(*args, **kwargs)
            torch = sys.modules["torch"]
            check.done = True  # one check; a nested or concurrent call runs untouched
            try:
                before = RngState(torch)
                saved = {name: b.detach().clone() for name, b in eager_root(module).named_buffers()}
                inputs = (clone_inputs(args), clone_inputs(kwargs))
            except Exception as err:
                check.done = False
                check.finish(error=f"could not copy the inputs: {err!r}")
                return original(*args, **kwargs)
            t0 = time.perf_counter()
            out = original(*args, **kwargs)
            compiled_s = time.perf_counter() - t0
            try:
                result = check.run_eager(torch, module, eager, inputs, before, saved, out)
                result["compiled_call_ms"] = compiled_s * 1e3
                check.done = False
                check.finish(result)
            except Exception as err:
                check.done = False
                check.finish(error=f"the eager original failed on the same batch: {type(err).__name__}: {err}")
            return out

        return checked

    def run_eager(self, torch: Any, module: Any, eager: Any, inputs: tuple[Any, Any], before: RngState,
                  saved: dict[str, Any], out: Any) -> dict[str, Any]:
        from torch.nn.utils.stateless import _reparametrize_module

        args, kwargs = inputs
        after = RngState(torch)
        with torch.no_grad(), _reparametrize_module(eager_root(module), saved):
            before.restore()
            try:
                t0 = time.perf_counter()
                reference = torch._dynamo.disable(eager, recursive=True)(*args, **kwargs)
                eager_s = time.perf_counter() - t0
            finally:
                after.restore()
            rows = compare(out, reference)
        root = eager_root(module)
        worst = max((r for r in rows if "max_rel" in r), key=lambda r: r["max_rel"], default=None)
        return {"module": type(root).__name__, "outputs": rows, "worst": worst,
                "equivalent": all(r["ok"] for r in rows) if rows else None,
                "random_modules": random_modules(root), "step": self.agent.step_count, "eager_call_ms": eager_s * 1e3}
