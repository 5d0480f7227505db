"""The override `precision.compute`: the job's modules compute in float32 where it made them
float64, and with `tf32` its float32 matmuls may also use TensorFloat-32
(set_float32_matmul_precision("high")).

The change is made at the modules' boundary, not where the job creates its tensors: everything is
created as the job made it (torch draws different random numbers for a float64 tensor than for a
float32 one, so a job seeded the same way would otherwise start from other weights and batches,
and its losses could not be compared), and at each module's call its float64 parameters and
buffers become float32 (once: `Module.float()`, which keeps the Parameter objects an optimizer
holds) and its float64 inputs are cast to float32. Work outside modules keeps its dtype. Each
module class is noted once, with the job's line that called it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .callers import caller_line


def job_line() -> str:
    """The job's line that called the module (the first frame outside torch and this agent)."""
    return os.path.basename(caller_line() or "?")


def patch_precision(torch: ModuleType, mode: str, note: Callable[[str, str], None]) -> None:
    """Install the module pre-hook; `note(what, where)` records each module class changed, once."""
    f64 = torch.float64
    converted: set[int] = set()
    noted: set[str] = set()

    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.float() if value.dtype is f64 else value
        if isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) and v.dtype is f64 for v in value):
            return type(value)(cast(v) for v in value)
        return value

    def before_forward(module: Any, args: Any) -> Any:
        # A global pre-hook sees the positional inputs only: a keyword input stays as it is, and
        # the modules it reaches cast it at their own call.
        if id(module) not in converted:
            converted.add(id(module))
            tensors = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
            if any(t.dtype is f64 for t in tensors):
                module.float()  # this module and its children, in place
                converted.update(id(m) for m in module.modules())
                kind = type(module).__name__
                if kind not in noted:
                    noted.add(kind)
                    note(f"{kind}: float64 parameters -> float32", job_line())
        cast_args = tuple(cast(a) for a in args)
        return cast_args if any(c is not a for c, a in zip(cast_args, args, strict=True)) else None

    torch.nn.modules.module.register_module_forward_pre_hook(before_forward)

    if mode == "tf32":
        base_precision = torch.set_float32_matmul_precision
        base_precision("high")
        note("set_float32_matmul_precision('high')", "import torch")

        @functools.wraps(base_precision)
        def set_float32_matmul_precision(wanted: str) -> None:
            if wanted != "high":
                note(f"set_float32_matmul_precision({wanted!r}) -> 'high'", job_line())
            base_precision("high")

        setattr(torch, "set_float32_matmul_precision", set_float32_matmul_precision)  # noqa: B010

