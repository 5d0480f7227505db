"""Reading memory inside the job: the process's use and limits, live tensors, who keeps them.

Standard library only; torch is passed in as the module the job imported. Everything
here runs at a few chosen moments (a census walks every object the collector tracks),
never on every step.
"""

from __future__ import annotations

import collections
import gc
import os
import re
import sys
import warnings
import weakref
from types import FrameType, ModuleType
from typing import Any

PAGE = os.sysconf("SC_PAGE_SIZE")
GRAPH_NODES_MAX = 300_000  # a census stops counting autograd nodes here (and says so)
GROUPS_KEPT = 12
AGENT_DIR = os.path.dirname(os.path.abspath(__file__))  # our own frames hold nothing of the job's


# -- the process ------------------------------------------------------------------------------
def status_fields(pid: str = "self") -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS), VmSize, VmPeak, VmData from /proc/PID/status, in bytes."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM", "VmSize", "VmPeak", "VmData"):
                    out[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def rss_vms() -> tuple[int, int]:
    """Resident and virtual size from /proc/self/statm: one small read, cheap enough per step."""
    try:
        with open("/proc/self/statm", "rb") as f:
            size, resident = f.read(64).split()[:2]
        return int(resident) * PAGE, int(size) * PAGE
    except (OSError, ValueError):
        return 0, 0


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_memory(pid: str = "self") -> tuple[int, int | None, int | None] | None:
    """(limit, current, peak) of the process's cgroup (v2, else v1); None without a limit."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, path = line.partition("::")
        if hierarchy == "0" and path:
            base = "/sys/fs/cgroup" + path.rstrip("/")
            limit = _read_int(f"{base}/memory.max")
            if limit is not None:
                return limit, _read_int(f"{base}/memory.current"), _read_int(f"{base}/memory.peak")
    limit = _read_int("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if limit is not None and limit < 1 << 60:
        return (limit, _read_int("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
                _read_int("/sys/fs/cgroup/memory/memory.max_usage_in_bytes"))
    return None


def mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rlimits(pid: str = "self") -> dict[str, int]:
    """Soft address-space and data limits from /proc/PID/limits (absent when unlimited)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                for label, kind in (("Max address space", "RLIMIT_AS"), ("Max data size", "RLIMIT_DATA")):
                    if line.startswith(label):
                        soft = line[len(label):].split()[0]
                        if soft.isdigit():
                            out[kind] = int(soft)
    except OSError:
        pass
    return out


def host_limits(pid: str = "self") -> list[dict[str, Any]]:
    """Each limit on the process's memory, with its own accounting of use and peak.

    RLIMIT_AS counts virtual size, RLIMIT_DATA the data segment, a cgroup its own
    charge, and RAM the resident set against what the kernel says is available."""
    status = status_fields(pid)
    limits: list[dict[str, Any]] = []
    soft = rlimits(pid)
    for kind, used, peak in (("RLIMIT_AS", status.get("VmSize"), status.get("VmPeak")),
                             ("RLIMIT_DATA", status.get("VmData"), status.get("VmData"))):
        if kind in soft and used is not None:
            limits.append({"kind": kind, "limit": soft[kind], "used": used, "peak": peak})
    cgroup = cgroup_memory(pid)
    if cgroup is not None and cgroup[1] is not None:
        limits.append({"kind": "cgroup memory.max", "limit": cgroup[0], "used": cgroup[1],
                       "peak": cgroup[2] if cgroup[2] is not None else cgroup[1]})
    available = mem_available()
    rss = status.get("VmRSS")
    if available is not None and rss is not None:
        limits.append({"kind": "available RAM", "limit": rss + available, "used": rss,
                       "peak": status.get("VmHWM", rss)})
    return limits


def cuda_memory(torch: ModuleType) -> dict[str, Any] | None:
    """The caching allocator's counters on the current device; None where CUDA is not in use."""
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        stats = torch.cuda.memory_stats()
        free, total = torch.cuda.mem_get_info()
    except Exception:
        return None
    return {"allocated": stats.get("allocated_bytes.all.current", 0),
            "allocated_peak": stats.get("allocated_bytes.all.peak", 0),
            "reserved": stats.get("reserved_bytes.all.current", 0),
            "reserved_peak": stats.get("reserved_bytes.all.peak", 0),
            "inactive_split": stats.get("inactive_split_bytes.all.current", 0),
            "alloc_retries": stats.get("num_alloc_retries", 0), "ooms": stats.get("num_ooms", 0),
            "free": free, "total": total, "device": torch.cuda.current_device()}


# -- an OOM ----------------------------------------------------------------------------------
OOM_PATTERNS = ("out of memory", "can't allocate memory", "cannot allocate memory")
REQUEST_BYTES = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)
REQUEST_UNITS = re.compile(r"tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)", re.IGNORECASE)
UNIT = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def is_oom(exc: BaseException) -> bool:
    if type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(p in str(exc).lower() for p in OOM_PATTERNS)


def requested_bytes(message: str) -> int | None:
    """The failed request's size, from the CPU or CUDA allocator's message."""
    match = REQUEST_BYTES.search(message)
    if match:
        return int(match.group(1))
    match = REQUEST_UNITS.search(message)
    if match:
        return int(float(match.group(1)) * UNIT[match.group(2).lower()])
    return None


# -- live tensors ----------------------------------------------------------------------------
def _storage(tensor: Any) -> tuple[int, int] | None:
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except Exception:  # sparse, meta, fake and other tensors without a plain storage
        return None


def tensors(torch: ModuleType) -> list[Any]:
    tensor_type = torch.Tensor
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a deprecated module attribute may warn when looked at
        return [o for o in gc.get_objects() if issubclass(type(o), tensor_type)]


def owned_bytes(torch: ModuleType) -> dict[str, Any]:
    """Parameters, their gradients and optimizer state, by unique storage, as this moment holds them."""
    parameter_type = torch.nn.Parameter
    optimizer_type = torch.optim.Optimizer
    seen: set[int] = set()
    totals = {"parameters": 0, "gradients": 0, "optimizer_state": 0}
    optimizers = 0

    def add(kind: str, tensor: Any) -> None:
        found = _storage(tensor)
        if found is not None and found[0] not in seen:
            seen.add(found[0])
            totals[kind] += found[1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        objects = gc.get_objects()
    for obj in objects:
        kind = type(obj)
        if issubclass(kind, parameter_type):
            add("parameters", obj)
            if obj.grad is not None:
                add("gradients", obj.grad)
        elif issubclass(kind, optimizer_type):
            optimizers += 1
            for state in list(getattr(obj, "state", {}).values()):
                for value in list(state.values()) if isinstance(state, dict) else ():
                    if issubclass(type(value), torch.Tensor):
                        add("optimizer_state", value)
    del objects
    return {**totals, "optimizers": optimizers, "storages": seen}


def graph_nodes(roots: list[Any]) -> int:
    """Autograd nodes reachable from these tensors' grad_fn (shared nodes once), up to a cap."""
    seen: set[int] = set()
    stack = [t.grad_fn for t in roots if getattr(t, "grad_fn", None) is not None]
    while stack and len(seen) < GRAPH_NODES_MAX:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        try:
            stack.extend(fn for fn, _ in node.next_functions)
        except Exception:
            pass
    return len(seen)


def group_key(tensor: Any) -> tuple[Any, ...]:
    """What a census groups a tensor by: shape, dtype, device, and whether it holds a graph."""
    return (tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""), tensor.device.type,
            tensor.grad_fn is not None)


def cuda_used(torch: ModuleType) -> tuple[int, int] | None:
    """Allocated and reserved bytes on the current device, cheap enough for every step of a
    window (no allocator stats dump, no cudaMemGetInfo); None where CUDA is not in use."""
    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return None
        return torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    except Exception:
        return None


def census(torch: ModuleType, exclude: set[int] | None = None) -> dict[str, Any]:
    """Live tensors grouped by (shape, dtype, device, holds a graph): count and unique bytes.

    Storages in `exclude` (already counted elsewhere) add no bytes."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    seen: set[int] = set(exclude or ())
    total = 0
    live = tensors(torch)
    for tensor in live:
        try:
            key = group_key(tensor)
        except Exception:
            continue
        group = groups.setdefault(key, [0, 0])
        group[0] += 1
        found = _storage(tensor)
        if found is not None and found[0] not in seen:
            seen.add(found[0])
            group[1] += found[1]
            total += found[1]
    nodes = graph_nodes([t for t in live if getattr(t, "grad_fn", None) is not None])
    del live
    return {"groups": groups, "tensors": sum(g[0] for g in groups.values()), "bytes": total, "graph_nodes": nodes,
            "graph_capped": nodes >= GRAPH_NODES_MAX}


def kept_since(torch: ModuleType, first: dict[int, Any], last: dict[int, Any]) -> tuple[int, int, dict[int, Any]]:
    """Tensors kept across steps, by identity: those alive now that were not alive at the window's
    first census (`first`) but already were at the previous checkpoint (`last`), their count and
    unique bytes (storages an older tensor still holds add none), and weak references to every
    tensor new since the first census (the next checkpoint's `last`).

    The batch of the step that just ended is not among them (it did not exist at the previous
    checkpoint), so batches whose size changes from step to step add no scatter."""
    now: dict[int, Any] = {}
    kept: list[Any] = []
    old_storages: set[int] = set()
    for tensor in tensors(torch):
        ref = first.get(id(tensor))
        if ref is not None and ref() is tensor:
            found = _storage(tensor)
            if found is not None:
                old_storages.add(found[0])
            continue
        try:
            now[id(tensor)] = weakref.ref(tensor)
        except TypeError:
            continue
        ref = last.get(id(tensor))
        if ref is not None and ref() is tensor:
            kept.append(tensor)
    seen = set(old_storages)
    total = 0
    for tensor in kept:
        found = _storage(tensor)
        if found is not None and found[0] not in seen:
            seen.add(found[0])
            total += found[1]
    count = len(kept)
    del kept
    return count, total, now


def refs(torch: ModuleType) -> dict[int, Any]:
    """Weak references to the live tensors, by id (a census's identities, for `kept_since`)."""
    out: dict[int, Any] = {}
    for tensor in tensors(torch):
        try:
            out[id(tensor)] = weakref.ref(tensor)
        except TypeError:
            continue
    return out


def describe_group(key: tuple[Any, ...]) -> str:
    shape, dtype, device, graph = key
    dims = "x".join(str(d) for d in shape) or "scalar"
    return f"{dims} {dtype} on {device}" + (" holding its autograd graph" if graph else "")


def largest_groups(counted: dict[str, Any], n: int) -> list[dict[str, Any]]:
    ranked = sorted(counted["groups"].items(), key=lambda kv: kv[1][1], reverse=True)[:n]
    return [{"what": describe_group(key), "count": count, "bytes": nbytes} for key, (count, nbytes) in ranked if nbytes]


def growing_groups(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Groups with more tensors at the second census than at the first, most first."""
    out = []
    for key, (count, nbytes) in after["groups"].items():
        old_count, old_bytes = before["groups"].get(key, (0, 0))
        if count > old_count:
            out.append({"key": key, "what": describe_group(key), "added": count - old_count,
                        "added_bytes": max(nbytes - old_bytes, 0), "count": count})
    out.sort(key=lambda g: (g["added_bytes"], g["added"]), reverse=True)
    return out[:GROUPS_KEPT]


# -- who keeps them alive --------------------------------------------------------------------------
_GROWS = r"\b{}\s*(?:\.(?:append|extend|add|insert|update|setdefault|__setitem__)\(|\[[^\]]*\]\s*=[^=]|\+=|=\s*(?:torch\.)?(?:cat|stack)\()"


def growth_site(code: Any, name: str) -> int | None:
    """The line of `code`'s function that adds to its local `name` (`name.append(...)`,
    `name[k] = ...`, `name += ...`, `name = torch.cat(...)`); None if no line does."""
    import linecache

    lines = linecache.getlines(code.co_filename)
    try:
        last = max(line for *_, line in code.co_lines() if line)
    except (AttributeError, ValueError):
        last = code.co_firstlineno
    pattern = re.compile(_GROWS.format(re.escape(name)))
    for number in range(code.co_firstlineno, min(last, len(lines)) + 1):
        if pattern.search(lines[number - 1].split("#", 1)[0]):
            return number
    return None


def _frame_name(frame: FrameType, obj: Any) -> str | None:
    """A local of a running frame that is `obj`: named with the line that adds to it, not the
    line the frame happens to be at (a leak once pointed at `scaler.step`, not the `append`)."""
    for name, value in frame.f_locals.items():
        if value is obj:
            code = frame.f_code
            site = growth_site(code, name)
            where = f"{os.path.basename(code.co_filename)}:{site}" if site else os.path.basename(code.co_filename)
            return f"{name}, a local of {code.co_name} ({where})"
    return None


def _namespace_owner(mapping: dict[Any, Any], obj: Any, ignore: set[int]) -> str | None:
    """`mapping` as an object's __dict__ or a module's globals: the attribute that holds `obj`."""
    key = next((k for k, v in mapping.items() if v is obj), None)
    if key is None:
        return None
    for ref in gc.get_referrers(mapping):
        if id(ref) not in ignore and getattr(ref, "__dict__", None) is mapping:
            return f"{type(ref).__name__}.{key}"
    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", None) is mapping:
            return f"{key}, a global of {module.__name__}"
    return None


def holder(obj: Any, ignore: set[int], depth: int = 3, frames: list[FrameType] | None = None) -> str | None:
    """Name what keeps `obj` alive: a local, an attribute, a global, or a container held by one.

    `frames`: the running thread's frames, whose locals the collector does not show as
    referrers (a running frame owns its locals), searched first."""
    for frame in frames or ():
        if not frame.f_code.co_filename.startswith(AGENT_DIR):
            named = _frame_name(frame, obj)
            if named:
                return named
    ignore = ignore | {id(sys._getframe())}
    for ref in gc.get_referrers(obj):
        if id(ref) in ignore:
            continue
        if isinstance(ref, FrameType):
            named = _frame_name(ref, obj) if not ref.f_code.co_filename.startswith(AGENT_DIR) else None
            if named:
                return named
            continue
        if isinstance(ref, dict):
            named = _namespace_owner(ref, obj, ignore | {id(ref)})
            if named:
                return named
        elif not isinstance(ref, (list, tuple, set, collections.deque, type)):
            # An object whose attributes live inline (3.11+ managed dicts): it refers directly.
            attrs = getattr(ref, "__dict__", None)
            key = next((k for k, v in attrs.items() if v is obj), None) if isinstance(attrs, dict) else None
            if key is not None:
                return f"{type(ref).__name__}.{key}"
        if isinstance(ref, (list, tuple, set, dict, collections.deque)) and depth > 1:
            outer = holder(ref, ignore | {id(ref)}, depth - 1, frames)
            if outer:
                return f"a {type(ref).__name__} of {len(ref)} items kept by {outer}"
    return None
