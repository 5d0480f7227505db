"""The process tree with psutil: CPU of the main process and each worker, RSS over time."""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def snapshot(root: psutil.Process) -> dict[int, dict[str, Any]]:
    """CPU seconds, RSS and context switches of the root and its live children.

    children_user/system in cpu_times() only count reaped children, never live
    DataLoader workers, so the children are walked one by one.
    """
    out: dict[int, dict[str, Any]] = {}
    for proc in [root, *root.children(recursive=True)]:
        try:
            with proc.oneshot():
                switches = proc.num_ctx_switches()
                out[proc.pid] = {"cpu": _cpu_seconds(proc), "rss": proc.memory_info().rss,
                                 "vol": switches.voluntary, "invol": switches.involuntary,
                                 "created": proc.create_time()}
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue  # workers come and go each epoch unless persistent_workers=True
    return out


def process_values(first: dict[int, dict[str, Any]], last: dict[int, dict[str, Any]], root_pid: int,
                   seconds: float, cores: int, rss_series: list[float], spawned: int) -> dict[str, Any]:
    def cores_used(pid: int) -> float:
        if pid not in last:
            return 0.0
        start = first.get(pid, {"cpu": 0.0})
        # A worker born inside the window is judged over its own life, not the whole window.
        lived = min(seconds, max(start.get("lifetime", seconds), 1e-3))
        return float(max(last[pid]["cpu"] - start["cpu"], 0.0) / lived)

    workers = [pid for pid in last if pid != root_pid]
    main = cores_used(root_pid)
    per_worker = [cores_used(pid) for pid in workers]
    total = main + sum(per_worker)
    vol = sum(last[p]["vol"] - first.get(p, {"vol": 0})["vol"] for p in last)
    invol = sum(last[p]["invol"] - first.get(p, {"invol": 0})["invol"] for p in last)
    minutes = seconds / 60
    return {
        "usable_cores": cores,
        "main_cpu_cores": round(main, 3),
        "worker_count": len(workers),
        "worker_cpu_cores": round(sum(per_worker), 3),
        # Cores, not a fraction: a worker with several threads can use more than one core.
        "worker_cores_mean": round(sum(per_worker) / len(per_worker), 3) if per_worker else None,
        "tree_cpu_fraction": round(min(total / cores, 1.0), 3) if cores else None,
        "voluntary_switch_share": round(vol / (vol + invol), 3) if vol + invol else None,
        "rss_mb": round(rss_series[-1], 1) if rss_series else None,
        "rss_growth_mb_per_min": round((rss_series[-1] - rss_series[0]) / minutes, 2) if len(rss_series) > 1 else None,
        "workers_spawned": spawned,
    }


def usable_cores(proc: psutil.Process) -> int:
    """The cores the target may run on (its CPU affinity), else the machine's."""
    try:
        return len(proc.cpu_affinity() or []) or (psutil.cpu_count() or 1)
    except (psutil.Error, AttributeError, OSError):
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (psutil.cpu_count() or 1)


def interval_cores(prev: dict[int, dict[str, Any]], now: dict[int, dict[str, Any]], root_pid: int,
                   dt: float) -> tuple[float, float]:
    """Cores used by the main process and by all its children between two snapshots."""
    if dt <= 0:
        return 0.0, 0.0

    def used(pid: int) -> float:
        before = prev[pid]["cpu"] if pid in prev else 0.0  # a child born since the last snapshot
        return float(max(now[pid]["cpu"] - before, 0.0) / dt)

    main = used(root_pid) if root_pid in now else 0.0
    return main, sum(used(pid) for pid in now if pid != root_pid)


@register
class ProcessCpu(Probe):
    id = "process.cpu"
    evidence_kinds = (ev.RSS_MB, ev.MAIN_CPU_CORES, ev.WORKER_CPU_CORES, ev.PER_PROCESS_CORES)
    title = "CPU of the main process and each DataLoader worker, RSS over time (psutil)"
    needs = frozenset({NEEDS_PROCESS})
    params = {"seconds": 4.0, "interval": 0.5}
    values = {"usable_cores": "cores", "main_cpu_cores": "cores", "worker_count": "",
              "worker_cpu_cores": "cores", "worker_cores_mean": "cores", "tree_cpu_fraction": "fraction",
              "voluntary_switch_share": "fraction", "rss_mb": "MB", "rss_growth_mb_per_min": "MB/min",
              "workers_spawned": ""}
    series = {"rss_mb": "MB", "main_cpu_cores": "cores", "worker_cpu_cores": "cores"}

    def run(self, ctx: ProbeContext, seconds: float = 4.0, interval: float = 0.5) -> Measurement:
        seconds = max(0.5, min(seconds, ctx.budget_left))
        if ctx.target.pid is None:
            return self.cannot("no target process")
        try:
            root = psutil.Process(ctx.target.pid)
            first = snapshot(root)
        except psutil.NoSuchProcess:
            return self.cannot(ctx.target.gone_reason())
        started = time.monotonic()
        wall_start = time.time()
        seen = set(first)
        rss_series = [sum(v["rss"] for v in first.values()) / 2**20]
        main_series: list[float] = []
        worker_series: list[float] = []
        per_pid_first = dict(first)
        last, last_at = first, started
        self.reading(ctx, elapsed=0.0, of=seconds, status=f"reading CPU and memory of pid {root.pid} and its children")
        while time.monotonic() - started < seconds:
            if not ctx.sleep(interval):
                break
            try:
                now = snapshot(root)
            except psutil.NoSuchProcess:
                return self.cannot(ctx.target.gone_reason(), seconds=time.monotonic() - started)
            now_at = time.monotonic()
            main_cores, child_cores = interval_cores(last, now, root.pid, now_at - last_at)
            last, last_at = now, now_at
            for pid, snap in last.items():
                # A worker born inside the window counts from its birth.
                born_inside = snap["created"] >= wall_start
                per_pid_first.setdefault(pid, {**snap, "cpu": 0.0, "vol": 0, "invol": 0, "born": snap["created"]}
                                         if born_inside else snap)
            seen |= set(last)
            rss_series.append(sum(v["rss"] for v in last.values()) / 2**20)
            main_series.append(round(main_cores, 3))
            worker_series.append(round(child_cores, 3))
            self.reading(ctx, elapsed=now_at - started, of=seconds,
                         series={"rss_mb": [round(x, 1) for x in rss_series[-120:]],
                                 "main_cpu_cores": main_series[-120:], "worker_cpu_cores": worker_series[-120:]},
                         values={"rss_mb": round(rss_series[-1], 1), "worker_count": len(last) - 1})
        elapsed = time.monotonic() - started
        if not ctx.target.alive():
            return self.cannot(ctx.target.gone_reason(), seconds=elapsed)
        wall_end = time.time()
        for snap in per_pid_first.values():
            if "born" in snap:
                snap["lifetime"] = wall_end - snap["born"]
        cores = usable_cores(root)
        values = process_values(per_pid_first, last, root.pid, elapsed, cores, rss_series, len(seen - set(first)))
        evidence = {"rss_mb": [round(x, 1) for x in rss_series],
                    "main_cpu_cores": main_series, "worker_cpu_cores": worker_series,
                    "per_process_cores": {str(pid): round((last[pid]["cpu"] - per_pid_first[pid]["cpu"]) / elapsed, 3)
                                          for pid in last}}
        return self.measurement(values=values, evidence=evidence, seconds=elapsed,
                                provenance=f"psutil cpu_times/memory_info of the process tree every {interval} s")
