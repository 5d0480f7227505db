"""The override `precision.compute`: the job computes in float32 where it asked for float64, and
with `tf32` its float32 matmuls may also use TensorFloat-32 (set_float32_matmul_precision("high")).

What is changed is each way a job names float64: torch.set_default_dtype, Module.double and
Tensor.double, `.to(torch.float64)` on a module or a tensor, the tensor factories' `dtype=`, and
torch.from_numpy / torch.as_tensor / torch.tensor of float64 data (numpy's default, which would
otherwise meet a float32 model and fail). Each place is noted once, by its line; the wrappers cost
a dtype comparison per call after that. The arm's losses are compared with the job's before its
speed counts (try-the-fix's equivalence).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .capabilities.overrides import _is_agent_or_torch

FACTORIES = ("zeros", "ones", "empty", "full", "rand", "randn", "arange", "linspace", "eye", "zeros_like",
             "ones_like", "empty_like", "full_like", "rand_like", "randn_like")
DATA = ("from_numpy", "as_tensor", "tensor")
MODES = ("float32", "tf32")


def patch_precision(torch: ModuleType, mode: str, note: Callable[[str, str], None]) -> None:
    """Install the wrappers; `note(what, where)` records each change once per calling line."""
    f64, f32 = torch.float64, torch.float32
    seen: set[tuple[Any, int]] = set()

    def by_job(what: str) -> bool:
        """Whether the wrapper's caller is the job (torch's own float64 stays float64), noting
        the change once per calling line."""
        frame = sys._getframe(2)
        if _is_agent_or_torch(frame.f_code.co_filename):
            return False
        key = (frame.f_code, frame.f_lineno)
        if key not in seen:
            seen.add(key)
            note(what, f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno}")
        return True

    def asks_float64(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        return kwargs.get("dtype") is f64 or any(a is f64 for a in args)

    def swapped(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if kwargs.get("dtype") is f64:
            kwargs["dtype"] = f32
        return tuple(f32 if a is f64 else a for a in args)

    base_default = torch.set_default_dtype

    @functools.wraps(base_default)
    def set_default_dtype(dtype: Any) -> None:
        if dtype is f64 and by_job("torch.set_default_dtype(torch.float64) -> float32"):
            dtype = f32
        base_default(dtype)

    setattr(torch, "set_default_dtype", set_default_dtype)  # noqa: B010

    for owner, kind in ((torch.nn.Module, "Module"), (torch.Tensor, "Tensor")):
        def double(this: Any, *args: Any, _double: Any = owner.double, _kind: str = kind, **kwargs: Any) -> Any:
            if by_job(f"{_kind}.double() -> .float()"):
                return this.float(*args, **kwargs)
            return _double(this, *args, **kwargs)

        def to(this: Any, *args: Any, _base: Any = owner.to, _kind: str = kind, **kwargs: Any) -> Any:
            if asks_float64(args, kwargs) and by_job(f"{_kind}.to(torch.float64) -> float32"):
                args = swapped(args, kwargs)
            return _base(this, *args, **kwargs)

        owner.double = functools.wraps(owner.double)(double)
        owner.to = functools.wraps(owner.to)(to)

    for name in FACTORIES:
        base = getattr(torch, name, None)
        if base is None:
            continue

        def factory(*args: Any, _base: Any = base, _name: str = name, **kwargs: Any) -> Any:
            if asks_float64(args, kwargs) and by_job(f"torch.{_name}(dtype=torch.float64) -> float32"):
                args = swapped(args, kwargs)
            return _base(*args, **kwargs)

        setattr(torch, name, functools.wraps(base)(factory))

    for name in DATA:
        base = getattr(torch, name, None)
        if base is None:
            continue

        def from_data(*args: Any, _base: Any = base, _name: str = name, **kwargs: Any) -> Any:
            tensor = _base(*args, **kwargs)
            if getattr(tensor, "dtype", None) is f64 and by_job(f"torch.{_name}(float64) -> float32"):
                tensor = tensor.float()
            return tensor

        setattr(torch, name, functools.wraps(base)(from_data))

    if mode == "tf32":
        base_precision = torch.set_float32_matmul_precision
        base_precision("high")
        note("set_float32_matmul_precision('high')", "import torch")

        @functools.wraps(base_precision)
        def set_float32_matmul_precision(wanted: str) -> None:
            base_precision("high" if by_job(f"set_float32_matmul_precision({wanted!r}) -> 'high'") else wanted)

        setattr(torch, "set_float32_matmul_precision", set_float32_matmul_precision)  # noqa: B010
