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
  threads.intra_op=N                  N intra-op threads, whatever torch.set_num_threads the job calls
  precision.compute=float32|tf32      modules made float64 compute in float32 (at their call); tf32
                                      also lets float32 matmuls use TF32 (precision.py)

Each change is streamed as `applied` ({name, value, where}), so a report can say what the arm
really ran with; an unknown name is a failed hook, never silently ignored.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from types import FrameType, ModuleType
from typing import Any

from ..callers import is_agent_or_torch
from ..capability import Capability

KNOWN = ("dataloader.num_workers", "dataloader.pin_memory", "dataloader.persistent_workers", "compile.dynamic",
         "dynamo.capture_scalar_outputs", "debug.anomaly", "debug.sync_debug", "threads.intra_op", "precision.compute")
COUNTS = ("dataloader.num_workers", "threads.intra_op")  # a whole number, 0 or more
CHOICES = {"precision.compute": ("float32", "tf32")}  # one of these words; every other name takes true or false


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


def override_problems(text: str) -> list[str]:
    """What is wrong with a FIELDGUIDE_OVERRIDES value, one line each (nothing: it can be applied).

    fieldguide checks it before it starts the job, so that a typo is an error of fieldguide's and
    not a crash on the job's own line; the agent checks again and applies only the good ones."""
    problems = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, raw = (part.strip() for part in item.partition("="))
        if not sep or not name:
            problems.append(f"{item!r} is not name=value")
        elif name not in KNOWN:
            problems.append(f"unknown override {name!r}; known: {', '.join(KNOWN)}")
        elif name in COUNTS and not raw.isdigit():
            problems.append(f"{name} must be a whole number, 0 or more (got {raw!r})")
        elif name in CHOICES and raw not in CHOICES[name]:
            problems.append(f"{name} must be one of {', '.join(CHOICES[name])} (got {raw!r})")
        elif name not in COUNTS and name not in CHOICES and raw.lower() not in ("true", "false"):
            problems.append(f"{name} must be true or false (got {raw!r})")
    return problems


def _is_installed(filename: str) -> bool:
    return "site-packages/" in filename or "dist-packages/" in filename


def caller(setting: str = "") -> str:
    """Where the call being changed was made, said as the user would change it: the job's own
    line, and when a framework made the call for it (a trainer building its DataLoader), which
    framework and, where one of its settings objects has a field named for the `setting`
    ("num_workers" -> TrainingArguments.dataloader_num_workers), that field: "train.py:70 via
    transformers (its setting TrainingArguments.dataloader_num_workers)"."""
    frames = [f for f in traceback.extract_stack()[:-1] if not is_agent_or_torch(f.filename)]
    if not frames:
        return "?"
    own_at = max((i for i, f in enumerate(frames) if not _is_installed(f.filename)), default=None)
    own = frames[own_at] if own_at is not None else None
    where = f"{os.path.basename(own.filename)}:{own.lineno}" if own else "?"
    if not _is_installed(frames[-1].filename):
        return where
    # The framework the job called (a Trainer), not the library that built the call for it.
    called = frames[own_at + 1 if own_at is not None else 0]
    package = called.filename.split("-packages/", 1)[1].split("/", 1)[0]
    field = settings_field(setting) if setting else None
    return f"{where} via {package} (its setting {field})" if field else f"{where} via {package}"


def settings_field(setting: str) -> str | None:
    """A settings object's field named for `setting`, as seen by the installed code that made the
    call: `self.args.dataloader_num_workers` read by a Trainer method -> "TrainingArguments.dataloader_num_workers"."""
    frame: FrameType | None = sys._getframe(2)
    try:
        while frame is not None:
            if _is_installed(frame.f_code.co_filename) and not is_agent_or_torch(frame.f_code.co_filename):
                owner = frame.f_locals.get("self")
                for candidate in (getattr(owner, "args", None), getattr(owner, "config", None), owner):
                    fields = getattr(candidate, "__dict__", None)
                    if not isinstance(fields, dict):
                        continue
                    for name in fields:
                        if name.endswith(setting) and not name.startswith("_"):
                            return f"{type(candidate).__name__}.{name}"
            frame = frame.f_back
    finally:
        del frame
    return None


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
        text = os.environ.get("FIELDGUIDE_OVERRIDES", "")
        problems = override_problems(text)
        if problems:
            self.agent.hook_failed(self.name, "FIELDGUIDE_OVERRIDES", ValueError("; ".join(problems)))
        # Only what can be applied: a bad value left in would crash the job's own call.
        self.values = {name: value for name, value in parse_overrides(text).items()
                       if not override_problems(f"{name}={value if isinstance(value, str) else str(value).lower()}")}

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
        if "threads.intra_op" in self.values and self.values["threads.intra_op"] > 0:
            self.patch_threads(torch, int(self.values["threads.intra_op"]))
        if "precision.compute" in self.values:
            from ..precision import patch_precision

            patch_precision(torch, str(self.values["precision.compute"]),
                            lambda what, where: self.note("precision.compute", what, where))
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
                for key in ("num_workers", "pin_memory", "persistent_workers"):
                    name = f"dataloader.{key}"
                    if name not in capability.values:
                        continue
                    where = caller(key)
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

    def patch_threads(self, torch: ModuleType, count: int) -> None:
        """The job runs `count` intra-op threads from its import of torch on: a set_num_threads of
        its own sets `count` instead (and is noted with its line)."""
        base = torch.set_num_threads
        capability = self

        @functools.wraps(base)
        def set_num_threads(wanted: int) -> None:
            capability.note("threads.intra_op", count, f"{caller()} (asked for {wanted})")
            base(count)

        base(count)
        self.note("threads.intra_op", count, "import torch")
        setattr(torch, "set_num_threads", set_num_threads)  # noqa: B010

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
