"""Find what can be diagnosed: Python processes that use torch, and (with NVML) GPU processes.

Read-only: /proc and psutil, and NVML's process list when a driver is there.
Nothing is signalled. A scan takes tens of milliseconds, so the picker runs it
in a thread worker. The scanner is injectable (tests pass a constructed list).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    user: str
    cpu_percent: float
    rss_mib: float
    cmdline: str
    torch: bool = True
    gpu_mb: int | None = None  # GPU memory NVML says it holds; None: not a GPU process (or no NVML)
    torch_children: int = 0  # child processes that also use torch (DataLoader workers), folded into this row


Scanner = Callable[[], list[ProcInfo]]


def maps_torch(pid: int) -> bool:
    """Whether the process has torch's native library mapped (it imported torch)."""
    from fieldguide.probes.env import torch_library_in_maps

    return torch_library_in_maps(pid) is not None


def gpu_processes(module: Any | None = None) -> tuple[dict[int, int | None], str]:
    """pid -> GPU memory (MB) for every compute process NVML lists, and NVML's status in words."""
    from fieldguide.host.nvml import Nvml, NvmlUnavailable

    try:
        nvml = Nvml.open(module)
    except NvmlUnavailable as err:
        return {}, str(err)
    found: dict[int, int | None] = {}
    try:
        count = nvml.count()
        for i in range(count):
            for pid, used in nvml.compute_pids(i).items():
                found[pid] = round(used / 2**20) if used else None
        return found, f"NVML: {count} GPU(s)"
    except Exception as err:
        return found, f"NVML error ({err})"
    finally:
        nvml.close()


def short_command(cmdline: str, long_arg: int = 24) -> str:
    """A command line as a person scans it: the program's name, and long paths by their last part."""
    parts = cmdline.split(" ")
    if not parts or not parts[0]:
        return cmdline
    out = [os.path.basename(parts[0]) or parts[0]]
    for arg in parts[1:]:
        out.append("…/" + os.path.basename(arg) if "/" in arg and len(arg) > long_arg and os.path.basename(arg) else arg)
    return " ".join(out)


class ProcessScanner:
    """Callable: each call scans once. CPU% is over the time since the previous scan
    (the first scan: since each process started)."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[float, float]] = {}
        self.status = ""

    def __call__(self) -> list[ProcInfo]:
        # psutil and the targets module load with the first scan, not at start-up.
        import psutil

        from fieldguide.host.access import is_python_name

        gpus, self.status = gpu_processes()
        me = os.getpid()
        now = time.monotonic()
        rows: dict[int, tuple[int, ProcInfo]] = {}
        seen: dict[int, tuple[float, float]] = {}
        for proc in psutil.process_iter(["pid", "ppid", "name", "username", "cmdline", "memory_info",
                                          "cpu_times", "create_time"]):
            info = proc.info
            pid = info["pid"]
            if pid == me:
                continue
            cmdline = info.get("cmdline") or []
            uses_torch = is_python_name(info.get("name") or "", *cmdline[:1]) and maps_torch(pid)
            if not uses_torch and pid not in gpus:
                continue
            times = info.get("cpu_times")
            cpu_total = (times.user + times.system) if times else 0.0
            seen[pid] = (cpu_total, now)
            if pid in self._last:
                before, at = self._last[pid]
                cpu = (cpu_total - before) / max(now - at, 1e-6) * 100
            else:
                cpu = cpu_total / max(time.time() - (info.get("create_time") or time.time()), 1e-6) * 100
            mem = info.get("memory_info")
            rows[pid] = (info.get("ppid") or 0, ProcInfo(
                pid=pid, user=info.get("username") or "?", cpu_percent=round(max(cpu, 0.0), 1),
                rss_mib=round(mem.rss / 2**20, 1) if mem else 0.0, cmdline=" ".join(cmdline) or info.get("name") or "",
                torch=uses_torch, gpu_mb=gpus.get(pid)))
        self._last = seen
        # DataLoader workers (children that also use torch) fold into their parent's row.
        children: dict[int, int] = {}
        for ppid, _ in rows.values():
            if ppid in rows:
                children[ppid] = children.get(ppid, 0) + 1
        out = []
        for pid, (ppid, row) in rows.items():
            if ppid in rows:
                continue
            if children.get(pid):
                row = ProcInfo(**{**row.__dict__, "torch_children": children[pid]})
            out.append(row)
        return sorted(out, key=lambda r: (-r.cpu_percent, r.pid))
