"""torch.compile from the inside: what dynamo compiled, when, how long, and what broke or recompiled.

All from torch's own structured sources, never its log text:
- compile callbacks (`torch._dynamo.callback`): the start and end of every compile (dynamo
  frames, and AOT's lazy backward), with the step it happened in;
- the compilation-metrics records (`torch._dynamo.utils.get_compilation_metrics`): per
  compile, its frame (file, first line, name: a graph break's resume function starts at the
  break's line), time by phase, the guard failure that caused a recompile, a failure (the
  recompile limit), FX-graph and AOT cache hits and misses;
- `torch._dynamo.utils.counters`: graph-break reasons with their counts.
Installed once the job imports `torch._dynamo` (torch.compile does), so a job that never
compiles never loads it. Streams `compiles` (callback pairs), `metrics` (one record per
compile) and `state` (counters and the config that decides caching and limits). Answers
`equivalence` (see equivalence.py): the compiled module against its eager original on the
job's next real batch.
"""

from __future__ import annotations

import sys
import time
from types import ModuleType
from typing import Any

from ..capability import Capability
from ..equivalence import EquivalenceCheck

METRIC_FIELDS = (
    "compile_id", "co_name", "co_filename", "co_firstlineno", "is_forward", "cache_size",
    "accumulated_cache_size", "graph_op_count", "entire_frame_compile_time_s", "backend_compile_time_s",
    "inductor_compile_time_s", "code_gen_time_s", "duration_us", "backward_cumulative_compile_time_us",
    "recompile_reason", "fail_type", "num_graph_breaks", "inductor_fx_local_cache_hit_count",
    "inductor_fx_local_cache_miss_count", "inductor_fx_remote_cache_hit_count", "aotautograd_local_cache_hit_count",
    "aotautograd_local_cache_miss_count", "start_time", "end_time_us",
)
TEXT_LIMIT = 600  # a reason is kept to its first lines: the type and explanation


def first_lines(text: Any, lines: int = 3) -> str | None:
    if text is None:
        return None
    return "\n".join(str(text).strip().splitlines()[:lines])[:TEXT_LIMIT]


def metric_row(record: Any) -> dict[str, Any]:
    row = {name: getattr(record, name, None) for name in METRIC_FIELDS}
    row["fail_reason"] = first_lines(getattr(record, "fail_reason", None))
    row["recompile_reason"] = first_lines(row["recompile_reason"], 2)
    row["restart_reasons"] = sorted(first_lines(r) or "" for r in (getattr(record, "restart_reasons", None) or ()))
    return row


class CompileWatch(Capability):
    name = "compile"
    streams = ("compiles", "metrics", "state")
    requests = ("equivalence",)

    def start(self) -> None:
        self.compiles = self.agent.stream(self.name, "compiles")
        self.metrics = self.agent.stream(self.name, "metrics")
        self.state = self.agent.stream(self.name, "state")
        self.dynamo: ModuleType | None = None
        self.open: dict[str, tuple[float, int]] = {}
        self.seen_metrics: set[tuple[Any, ...]] = set()
        self.last_state: dict[str, Any] | None = None
        self.config_seen: dict[str, Any] = {}  # as the compiling thread sees it, at the last compile
        self.check: EquivalenceCheck | None = None

    def hook_torch(self, torch: ModuleType) -> None:
        if "torch._dynamo" in sys.modules:
            self.install(sys.modules["torch._dynamo"])
        else:
            from ..torchwatch import TorchWatcher

            sys.meta_path.insert(0, TorchWatcher(self.install, "torch._dynamo"))

    def install(self, dynamo: ModuleType) -> None:
        """Register the compile callbacks (again after a `torch._dynamo.reset()`, which clears them)."""
        try:
            from torch._dynamo import callback

            handler = callback.callback_handler
            if self.on_start not in handler.start_callbacks:
                callback.on_compile_start(self.on_start)
            if self.on_end not in handler.end_callbacks:
                callback.on_compile_end(self.on_end)
            self.dynamo = dynamo
        except Exception as err:
            self.agent.hook_failed(self.name, "compile callbacks", err)

    # -- on the compiling thread: only appends ---------------------------------------
    # Called inside torch's compile: an exception here would fail the user's compile, so none leaves.
    def on_start(self, args: Any) -> None:
        try:
            self.open[str(args.compile_id)] = (time.monotonic(), self.agent.step_count)
        except Exception:
            pass

    def on_end(self, args: Any) -> None:
        try:
            # torch's config overrides are thread-local: read them here, on the thread that compiles.
            config = sys.modules.get("torch._dynamo.config")
            if config is not None:
                self.config_seen = self.config(config)
            compile_id = str(args.compile_id)
            started, step = self.open.pop(compile_id, (None, self.agent.step_count))
            trigger = getattr(args.callback_trigger, "name", str(args.callback_trigger))
            self.compiles.append({"id": compile_id, "trigger": trigger, "t_start": started,
                                  "t_end": time.monotonic(), "step": step})
        except Exception:
            pass

    # -- on the agent thread ---------------------------------------------------------
    def tick(self) -> None:
        if self.dynamo is None:
            if "torch._dynamo.callback" in sys.modules:  # imported before our watcher stood
                self.install(sys.modules["torch._dynamo"])
            return
        self.install(self.dynamo)
        self.read_metrics()
        self.read_state()
        if self.check is not None:
            self.check.tick()

    def read_metrics(self) -> None:
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None:
            return
        for record in utils.get_compilation_metrics():
            key = (record.compile_id, record.start_time_us, record.is_forward)
            if key in self.seen_metrics:
                continue
            self.seen_metrics.add(key)
            self.metrics.append(metric_row(record))

    def read_state(self) -> None:
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None:
            return
        counters = utils.counters
        state = {
            "graph_breaks": {first_lines(k) or "": v for k, v in dict(counters.get("graph_break", {})).items()},
            "frames": dict(counters.get("frames", {})),
            "stats": dict(counters.get("stats", {})),
            "limit_hits": sum(v for k, v in dict(counters.get("unimplemented", {})).items()
                              if "recompile limit" in k or "cache_size_limit" in k),
            "config": self.config_seen,
        }
        if state != self.last_state:
            self.last_state = state
            self.state.append({**state, "t": time.monotonic(), "step": self.agent.step_count})

    @staticmethod
    def config(dynamo_config: ModuleType) -> dict[str, Any]:
        import os

        found: dict[str, Any] = {
            "recompile_limit": getattr(dynamo_config, "recompile_limit", getattr(dynamo_config, "cache_size_limit", None)),
            "automatic_dynamic_shapes": getattr(dynamo_config, "automatic_dynamic_shapes", None),
            "capture_scalar_outputs": getattr(dynamo_config, "capture_scalar_outputs", None),
            "disable": getattr(dynamo_config, "disable", None),
            "torch_trace": os.environ.get("TORCH_TRACE"),
        }
        inductor = sys.modules.get("torch._inductor.config")
        if inductor is not None:
            found["fx_graph_cache"] = getattr(inductor, "fx_graph_cache", None)
            found["force_disable_caches"] = getattr(inductor, "force_disable_caches", None)
            found["fallback_random"] = getattr(inductor, "fallback_random", None)
            dirs = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
            try:
                found["cache_dir"] = dirs.cache_dir() if dirs is not None else os.environ.get("TORCHINDUCTOR_CACHE_DIR")
            except Exception:
                found["cache_dir"] = None
        return found

    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        if self.check is not None and not self.check.done:
            self.agent.fail(request_id, "an equivalence check is already waiting for a batch")
            return
        self.check = EquivalenceCheck(self.agent, request_id, float(params.get("timeout_s", 20)))
        self.check.arm()


CAPABILITY = CompileWatch
