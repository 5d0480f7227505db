"""A fix applied from outside the script: FIELDGUIDE_OVERRIDES=name=value[,name=value...].

fieldguide sets it when it relaunches a job to try a cause's fix (`diagnose --try-fix`); a user
sets it by hand to reproduce the experiment. The script is never edited: the agent changes the
arguments its calls receive.

  dataloader.num_workers=N           every DataLoader gets N workers
  dataloader.pin_memory=true|false
  dataloader.persistent_workers=true (applied where the loader has workers; it needs them)
  compile.dynamic=true|false          torch.compile(..., dynamic=)
  dynamo.capture_scalar_outputs=true  .item() in a compiled forward captured instead of breaking
  debug.anomaly=false                 set_detect_anomaly / detect_anomaly do nothing
  debug.sync_debug=false              set_sync_debug_mode(...) sets 0

Each change is streamed as `applied` ({name, value, where}), so a report can say what the arm
really ran with; an unknown name is a failed hook, never silently ignored.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from types import ModuleType
from typing import Any

from ..capability import Capability

KNOWN = ("dataloader.num_workers", "dataloader.pin_memory", "dataloader.persistent_workers", "compile.dynamic",
         "dynamo.capture_scalar_outputs", "debug.anomaly", "debug.sync_debug")


def parse_overrides(text: str) -> dict[str, Any]:
    """"dataloader.num_workers=4,dataloader.pin_memory=true" -> {name: 4, name: True}."""
    found: dict[str, Any] = {}
    for item in text.split(","):
        if "=" not in item:
            continue
        name, raw = (part.strip() for part in item.split("=", 1))
        lowered = raw.lower()
        value: Any = True if lowered == "true" else False if lowered == "false" else raw
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        found[name] = value
    return found


def caller() -> str:
    """The job's own line that made the call being changed."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if "/torch/" not in frame.filename and "_fieldguide_agent" not in frame.filename \
                and "fieldguide/agent" not in frame.filename:
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "?"


class NoAnomaly:
    """set_detect_anomaly / detect_anomaly, switched off: usable as a call or a context manager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


class Overrides(Capability):
    name = "overrides"
    streams = ("applied",)

    def start(self) -> None:
        self.applied = self.agent.stream(self.name, "applied")
        self.values = parse_overrides(os.environ.get("FIELDGUIDE_OVERRIDES", ""))
        unknown = [name for name in self.values if name not in KNOWN]
        if unknown:
            self.agent.hook_failed(self.name, "FIELDGUIDE_OVERRIDES",
                                   ValueError(f"unknown override(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}"))

    def note(self, name: str, value: Any, where: str) -> None:
        self.applied.append({"name": name, "value": value, "where": where})

    def hook_torch(self, torch: ModuleType) -> None:
        if not self.values:
            return
        if any(name.startswith("dataloader.") for name in self.values):
            self.patch_dataloader(torch)
        if "compile.dynamic" in self.values:
            self.patch_compile(torch)
        if "debug.anomaly" in self.values and not self.values["debug.anomaly"]:
            torch.autograd.set_detect_anomaly = NoAnomaly
            torch.autograd.detect_anomaly = NoAnomaly
            self.note("debug.anomaly", False, "torch.autograd")
        if "debug.sync_debug" in self.values and not self.values["debug.sync_debug"]:
            base = torch.cuda.set_sync_debug_mode
            torch.cuda.set_sync_debug_mode = lambda mode: base(0)
            self.note("debug.sync_debug", False, "torch.cuda")
        if "dynamo.capture_scalar_outputs" in self.values:
            # On the importing thread: torch's config overrides are thread-local.
            if "torch._dynamo" in sys.modules:
                self.set_capture(sys.modules["torch._dynamo"])
            else:
                from ..torchwatch import TorchWatcher

                sys.meta_path.insert(0, TorchWatcher(self.set_capture, "torch._dynamo"))

    def set_capture(self, dynamo: ModuleType) -> None:
        value = bool(self.values["dynamo.capture_scalar_outputs"])
        setattr(sys.modules["torch._dynamo.config"], "capture_scalar_outputs", value)  # noqa: B010
        self.note("dynamo.capture_scalar_outputs", value, "torch._dynamo.config")

    def patch_dataloader(self, torch: ModuleType) -> None:
        loader_cls = torch.utils.data.DataLoader
        base_init = loader_cls.__init__
        signature = inspect.signature(base_init)
        capability = self

        @functools.wraps(base_init)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = signature.bind_partial(loader, *args, **kwargs)
                arguments = bound.arguments
                where = caller()
                for key in ("num_workers", "pin_memory", "persistent_workers"):
                    name = f"dataloader.{key}"
                    if name not in capability.values:
                        continue
                    value = capability.values[name]
                    if key == "persistent_workers" and not (arguments.get("num_workers") or 0):
                        capability.note(name, "not applied: the loader has no workers", where)
                        continue
                    arguments[key] = value
                    capability.note(name, value, where)
                if not arguments.get("num_workers"):
                    arguments.pop("persistent_workers", None)  # True without workers raises
                args, kwargs = bound.args[1:], bound.kwargs
            except Exception as err:
                capability.agent.hook_failed(capability.name, "DataLoader overrides", err)
            base_init(loader, *args, **kwargs)

        loader_cls.__init__ = __init__

    def patch_compile(self, torch: ModuleType) -> None:
        base = torch.compile
        capability = self
        dynamic = bool(self.values["compile.dynamic"])

        @functools.wraps(base)
        def compile(*args: Any, **kwargs: Any) -> Any:
            kwargs["dynamic"] = dynamic
            capability.note("compile.dynamic", dynamic, caller())
            return base(*args, **kwargs)

        setattr(torch, "compile", compile)  # noqa: B010


CAPABILITY = Overrides
