"""Memory: how use changes step over step, what it is made of at its peak, and the OOM.

Idle, it installs nothing on the training thread. Requests:
- `watch` {seconds}: at each step boundary for that long, a row (rows.MemoryRow),
  streamed as it goes; a census of live tensors at the first and the last boundary,
  and what grew between them, with what keeps the growth alive; and at boundaries spread
  over the window, the tensors kept across steps (by identity: made since the first census,
  still alive a checkpoint later), whose bytes over time are the growth and its scatter.
- `breakdown`: the next whole step with saved tensors tracked (a saved-tensor pack
  hook: activations kept for backward, parameters' views left out), then parameters,
  gradients and optimizer state by unique storage, the other live tensors, the peak
  use and the limits. Answered at the boundary that ends the tracked step.
Armed at launch (the oom playbook asks), saved tensors are tracked in every step from
the job's start, so an out-of-memory error in any step, even the first, is
attributed: at an uncaught OOM the breakdown of that moment and the failed request's
size go to the `events` stream before the job exits.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from types import FrameType, ModuleType
from typing import Any

from .. import memread
from ..capability import Capability
from ..rows import MemoryRow, RssRow

MAX_WATCH_SECONDS = 120.0
STALL_SECONDS = 5.0
RSS_EVERY = 1.0
KEPT_CHECKPOINTS = 6  # censuses of kept tensors spread over a watch window
HOLDER_TRIES = 5  # tensors of the growing group whose holders are looked for
HISTORY_ENTRIES = 100_000  # allocation events kept for the snapshot (a ring buffer)  # no step boundary this long after the window: answer with what there is


class Memory(Capability):
    name = "memory"
    requests = ("watch", "breakdown")
    streams = ("steps", "events", "rss")

    def start(self) -> None:
        self.rows = self.agent.stream(self.name, "steps")
        self.events = self.agent.stream(self.name, "events")
        self.rss = self.agent.stream(self.name, "rss")  # once a second from the agent thread: the last seen
        self.rss_at = 0.0
        self.armed = self.history = False
        self.torch: ModuleType | None = None
        self.watch: dict[str, Any] | None = None
        self.breakdowns: collections.deque[Any] = collections.deque()
        self.tracking = False  # the pack hook is on the training thread's stack
        self.tracked_step: dict[str, Any] | None = None  # the step whose saved tensors are being summed
        self.saved: dict[int, int] = {}
        self.saved_bytes = 0
        self.peak_saved: dict[str, Any] = {}
        self.first_forward_hook: Any = None

    def arm(self, options: frozenset[str]) -> None:
        self.armed = True
        self.history = "history" in options  # CUDA: record allocations, dump a snapshot at the OOM

    def hook_torch(self, torch: ModuleType) -> None:
        self.torch = torch
        if self.armed:
            # The saved-tensor hook stack is per thread: push it from the first forward, which runs
            # on the training thread (torch may have been hooked from another), then drop this hook.
            from torch.nn.modules.module import register_module_forward_pre_hook

            def first_forward(module: Any, args: Any) -> None:
                handle = self.first_forward_hook
                if handle is not None:
                    self.first_forward_hook = None
                    handle.remove()
                    self.push_pack_hook()

            self.first_forward_hook = register_module_forward_pre_hook(first_forward)
            self.agent.add_step_listener(self)
        self.attach_cuda_oom_observer(torch)
        if self.history and torch.cuda.is_available():
            torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)

    # -- saved tensors --------------------------------------------------------------------------
    def push_pack_hook(self) -> None:
        """On the training thread (its first forward, or a step boundary): saved tensors pass through `pack`."""
        if self.tracking or self.torch is None:
            return
        parameter = self.torch.nn.Parameter

        def pack(tensor: Any) -> Any:
            try:
                base = tensor._base if tensor._is_view() else tensor
                if not isinstance(base, parameter):
                    storage = tensor.untyped_storage()
                    ptr = storage.data_ptr()
                    if ptr not in self.saved:
                        self.saved[ptr] = storage.nbytes()
                        self.saved_bytes += self.saved[ptr]
            except Exception:
                pass
            return tensor

        self.torch._C._autograd._push_saved_tensors_default_hooks(pack, lambda tensor: tensor)
        self.tracking = True
        self.saved, self.saved_bytes = {}, 0

    def pop_pack_hook(self) -> None:
        if self.tracking and self.torch is not None:
            self.torch._C._autograd._pop_saved_tensors_default_hooks()
            self.tracking = False

    def end_tracked_step(self) -> None:
        """A step boundary: the step's saved bytes are final; keep the largest step's."""
        if self.tracking and self.saved_bytes >= self.peak_saved.get("bytes", 0):
            self.peak_saved = {"bytes": self.saved_bytes, "tensors": len(self.saved), "step": self.agent.step_count}
        self.saved, self.saved_bytes = {}, 0

    # -- requests ---------------------------------------------------------------------------------
    def on_request(self, name: str, request_id: Any, params: dict[str, Any]) -> None:
        if self.torch is None:
            self.agent.fail(request_id, "the target has not imported torch")
            return
        if name == "watch":
            if self.watch is not None:
                self.agent.fail(request_id, "a memory watch is already running")
                return
            seconds = min(float(params.get("seconds", 8.0)), MAX_WATCH_SECONDS)
            self.watch = {"id": request_id, "seconds": seconds, "asked": time.monotonic(), "until": None,
                          "rows": [], "before": None}
        else:
            self.breakdowns.append({"id": request_id, "asked": time.monotonic(), "started": False})
        self.agent.add_step_listener(self)

    def on_step(self) -> None:
        """The training thread, at a boundary."""
        self.end_tracked_step()
        if self.watch is not None:
            self.watch_step(self.watch)
        if self.breakdowns:
            self.breakdown_step()
        if not self.armed and self.watch is None and not self.breakdowns:
            self.agent.remove_step_listener(self)

    def row(self) -> MemoryRow:
        rss, vms = memread.rss_vms()
        cuda = memread.cuda_used(self.torch) if self.torch is not None else None
        return MemoryRow(self.agent.step_count, round(time.monotonic(), 4), rss, vms,
                         cuda[0] if cuda else None, cuda[1] if cuda else None)

    def watch_step(self, watch: dict[str, Any]) -> None:
        assert self.torch is not None
        now = time.monotonic()
        if watch["before"] is None:
            watch["before"] = memread.census(self.torch)
            watch["until"] = now + watch["seconds"]
            watch["first"], watch["last"] = memread.refs(self.torch), {}
            watch["kept"] = [[round(now, 4), self.agent.step_count, 0, 0]]
            watch["checked"] = None  # the last checkpoint: (t, step)
            watch["next"] = now + watch["seconds"] / KEPT_CHECKPOINTS
        row = self.row()
        watch["rows"].append(row)
        self.rows.append(row)
        if now >= watch["until"] or now >= watch["next"]:
            self.checkpoint(watch, now)
        if now >= watch["until"]:
            self.watch = None
            watch.pop("first"), watch.pop("last")
            self.answer_watch(watch, memread.census(self.torch))

    def checkpoint(self, watch: dict[str, Any], now: float) -> None:
        """The tensors new since the first census that were already alive at the last checkpoint:
        a point (that checkpoint's time and step, their count and bytes) of what steps keep."""
        assert self.torch is not None
        count, nbytes, watch["last"] = memread.kept_since(self.torch, watch["first"], watch["last"])
        if watch["checked"] is not None:
            watch["kept"].append([*watch["checked"], count, nbytes])
        watch["checked"] = (round(now, 4), self.agent.step_count)
        watch["next"] = now + watch["seconds"] / KEPT_CHECKPOINTS

    def answer_watch(self, watch: dict[str, Any], after: dict[str, Any] | None) -> None:
        before = watch["before"]
        result: dict[str, Any] = {"rows": watch["rows"], "kept": watch.get("kept") or []}
        if before is not None and after is not None:
            growing = memread.growing_groups(before, after)
            result["census"] = [{k: c[k] for k in ("tensors", "bytes", "graph_nodes", "graph_capped")}
                                for c in (before, after)]
            result["growing"] = [{k: v for k, v in g.items() if k != "key"} for g in growing]
            result["kept_by"] = self.name_holders(growing, after)
        self.agent.reply(watch["id"], result)

    def name_holders(self, growing: list[dict[str, Any]], after: dict[str, Any]) -> dict[str, str]:
        """Who keeps the fastest-growing group alive, and the tensor holding the largest graph."""
        assert self.torch is not None
        # The training thread's own frames: a running frame's locals are no referrers, so the
        # holder search looks in them directly.
        frames = []
        frame: FrameType | None = sys._getframe()
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        ignore = {id(frames), id(after)}
        named: dict[str, str] = {}
        live = memread.tensors(self.torch)
        ignore.add(id(live))
        try:
            if growing:
                # Several of the group, oldest first: the newest is often also a local of the loop
                # (`logits`), while what keeps them all is the container the old ones sit in.
                key = growing[0]["key"]
                group = [t for t in live if memread.group_key(t) == key]
                ignore.add(id(group))
                local = None
                for tensor in group[:HOLDER_TRIES]:
                    found = memread.holder(tensor, ignore, frames=frames)
                    if found and ", a local of " in found and not found.startswith("a "):
                        local = local or found
                    elif found:
                        named["growing"] = found
                        break
                if "growing" not in named and local:
                    named["growing"] = local
            graphs = [t for t in live if t.grad_fn is not None]
            if graphs:
                biggest = max(graphs[-200:], key=lambda t: memread.graph_nodes([t]))
                found = memread.holder(biggest, ignore | {id(graphs)}, frames=frames)
                if found:
                    named["graph"] = f"{found} ({type(biggest.grad_fn).__name__})"
        finally:
            del live, frames
        return named

    def breakdown_step(self) -> None:
        pending = self.breakdowns[0]
        if not pending["started"]:  # the next step is the tracked one
            pending["started"] = True
            self.push_pack_hook()
            return
        self.breakdowns.popleft()
        result = self.breakdown(self.peak_saved)
        if not self.armed:
            self.pop_pack_hook()
        self.agent.reply(pending["id"], result)
        while self.breakdowns:  # others asked meanwhile: the same step answers them
            self.agent.reply(self.breakdowns.popleft()["id"], result)

    def breakdown(self, saved: dict[str, Any], at: str = "step", saved_ptrs: set[int] | None = None) -> dict[str, Any]:
        assert self.torch is not None
        owned = memread.owned_bytes(self.torch)
        # Tensors saved for backward are held by the graph as Python objects (our pack hook
        # returns them): counted once, as activations, not again as other tensors.
        other = memread.census(self.torch, exclude=owned["storages"] | (saved_ptrs or set()))
        rss, vms = memread.rss_vms()
        return {"at": at, "step": self.agent.step_count, "parameters": owned["parameters"],
                "gradients": owned["gradients"], "optimizer_state": owned["optimizer_state"],
                "optimizers": owned["optimizers"], "activations": saved.get("bytes"),
                "activation_tensors": saved.get("tensors"), "activations_step": saved.get("step"),
                "other_tensors": other["bytes"], "other_largest": memread.largest_groups(other, 5),
                "rss": rss, "vms": vms, "limits": memread.host_limits(), "cuda": memread.cuda_memory(self.torch)}

    # -- the agent thread -----------------------------------------------------------------------------
    def tick(self) -> None:
        watch = self.watch
        now = time.monotonic()
        if now - self.rss_at >= RSS_EVERY:
            self.rss_at = now
            self.rss.append(RssRow(round(now, 3), memread.rss_vms()[0], self.agent.step_count))
        if watch is not None and now - max(watch["until"] or watch["asked"], self.agent.last_step_seen) > STALL_SECONDS:
            self.watch = None  # no boundary to end the window on: answer with the rows there are
            self.answer_watch(watch, None)
        if self.breakdowns and now - max(self.breakdowns[0]["asked"], self.agent.last_step_seen) > STALL_SECONDS:
            for pending in list(self.breakdowns):
                self.agent.fail(pending["id"], f"no training step for {STALL_SECONDS:.0f} s to measure")
            self.breakdowns.clear()

    # -- out of memory ---------------------------------------------------------------------------------
    def on_exception(self, exc: BaseException) -> None:
        if self.torch is None or not memread.is_oom(exc):
            return
        in_flight = set(self.saved)
        self.end_tracked_step()  # the hooks stay: the job is ending, and its thread-local stack may be gone
        result = self.breakdown(self.peak_saved if self.armed else {}, at="oom", saved_ptrs=in_flight)
        result.update(event="oom", error=type(exc).__name__, message=str(exc)[:300],
                      requested=memread.requested_bytes(str(exc)), armed=self.armed, armed_history=self.history,
                      snapshot=self.dump_snapshot())
        self.events.append(result)

    def dump_snapshot(self) -> str | None:
        """With recorded history, the allocator's snapshot for pytorch.org/memory_viz, beside our socket."""
        if not self.history or self.torch is None or not self.torch.cuda.is_initialized():
            return None
        directory = os.path.dirname(os.environ.get("FIELDGUIDE_AGENT_SOCKET", "")) or "."
        path = os.path.join(directory, f"memory-snapshot-{os.getpid()}.pickle")
        try:
            self.torch.cuda.memory._dump_snapshot(path)
        except Exception:
            return None
        return path

    def attach_cuda_oom_observer(self, torch: ModuleType) -> None:
        """CUDA: the allocator calls us at an OOM even when the job catches the error."""
        attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None or not torch.cuda.is_available():
            return

        def observer(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
            self.events.append({"event": "cuda_oom", "device": device, "requested": alloc,
                                "allocated": device_allocated, "free": device_free, "step": self.agent.step_count,
                                "snapshot": self.dump_snapshot()})

        attach(observer)


CAPABILITY = Memory
