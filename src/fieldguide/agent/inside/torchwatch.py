"""A meta path finder that calls back the moment a module's import finishes (torch, torch._dynamo)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class TorchWatcher:
    searching = False

    def __init__(self, on_import: Callable[[ModuleType], None], module: str = "torch") -> None:
        self.on_import = on_import
        self.module = module

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        # Libraries probe with importlib.util.find_spec("torch") without importing it, so the
        # watcher stays until torch's module code has really run.
        if fullname != self.module or self.searching:
            return None
        self.searching = True
        try:
            spec = importlib.util.find_spec(self.module)
        finally:
            self.searching = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module
        watcher = self

        def exec_module(module: ModuleType) -> None:
            loader_exec(module)
            if watcher in sys.meta_path:
                sys.meta_path.remove(watcher)
            watcher.on_import(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
