"""The ranks of a multi-rank job seen from outside: processes whose environment names a RANK (or
a LOCAL_RANK on a node, as Lightning's own launcher sets) in the same job (TORCHELASTIC_RUN_ID,
else MASTER_ADDR:MASTER_PORT) as the given process, or as its children when it is the launcher
(torchrun, srun's step), or rank 0 itself when it started the others (Lightning's DDP). Workers
of `torch.multiprocessing.spawn` carry no rank in their environment: their stacks do."""

from __future__ import annotations

import re
import socket
import subprocess
from typing import Any

from fieldguide.agent.inside.capabilities.collectives import global_rank, job_identity, node_rank_of

JOB_KEYS = ("JOB_ID", "MASTER_ADDR", "MASTER_PORT")


def _identity(proc: Any) -> dict[str, str] | None:
    import psutil

    try:
        env = job_identity(proc.environ())
    except (psutil.Error, OSError):
        return None
    try:
        if int(env.get("WORLD_SIZE", "1") or 1) <= 1 or global_rank(env) is None:
            return None
    except ValueError:
        return None
    return env


def _job(env: dict[str, str]) -> tuple[str, ...]:
    return tuple(env.get(k, "") for k in JOB_KEYS)


def sibling_ranks(pid: int) -> list[dict[str, Any]]:
    """[{rank, pid, host, world_size}] of the job `pid` belongs to or launched; [] if none."""
    import psutil

    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return []
    own = _identity(proc)
    if own is not None:  # a rank: its siblings are its parent's children in the same job
        parent = proc.parent()
        candidates = parent.children(recursive=True) if parent is not None else [proc]
        job = _job(own)
    else:  # a launcher: its descendants that are ranks, of the first job found
        candidates = proc.children(recursive=True)
        job = None
    found: dict[int, dict[str, Any]] = {}
    for candidate in candidates:
        env = _identity(candidate)
        if env is None:
            continue
        if job is None:
            job = _job(env)
        if _job(env) != job:
            continue
        rank = global_rank(env)
        assert rank is not None
        # A DataLoader worker inherits its rank's environment: the rank is the oldest of them.
        try:
            created = candidate.create_time()
        except psutil.Error:
            continue
        if rank not in found or created < found[rank]["created"]:
            found[rank] = {"rank": rank, "pid": candidate.pid, "host": socket.gethostname(),
                           "world_size": int(env.get("WORLD_SIZE", "1")), "node_rank": node_rank_of(env),
                           "identity": {k: env[k] for k in ("JOB_ID", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
                                        if k in env}, "created": created}
    _add_launching_rank(proc, own, found)
    if not found:
        found = _spawned_ranks(proc)
    return [{k: v for k, v in found[r].items() if k != "created"} for r in sorted(found)]


def _add_launching_rank(proc: Any, own: dict[str, str] | None, found: dict[int, dict[str, Any]]) -> None:
    """A framework that starts the other ranks from rank 0 (Lightning's DDP re-runs the script for
    local ranks 1..n-1) leaves rank 0 without any rank in its environment: it is the parent of the
    ranks found, and the one rank missing. torchrun and mp.spawn start every rank as a child:
    none is missing, and their parent is no rank."""
    import psutil

    if not found or 0 in found:
        return
    try:
        parents = {psutil.Process(r["pid"]).ppid() for r in found.values()}
        root = proc if own is None else proc.parent()
        if root is None or parents != {root.pid} or _identity(root) is not None:
            return
        world = max(r["world_size"] for r in found.values())
        if len(found) != world - 1:
            return
        found[0] = {"rank": 0, "pid": root.pid, "host": socket.gethostname(), "world_size": world,
                    "created": root.create_time()}
    except psutil.Error:
        return


# The frame torch.multiprocessing.spawn runs each worker's function in, and its rank argument.
SPAWN_WRAP = re.compile(r"^\s+_wrap \(torch/multiprocessing/spawn\.py:\d+\)\n\s+Arguments:\n(?:\s+\w+: .*\n)*?\s+i: (\d+)$",
                        re.MULTILINE)


def _spawned_ranks(proc: Any) -> dict[int, dict[str, Any]]:
    """The workers `torch.multiprocessing.spawn` started (the given process, or its parent when
    given one of them): each one's rank is the `i` its `_wrap` frame was called with, read from a
    non-blocking stack dump's locals; the world is the workers found. A DataLoader's spawned
    workers run no `_wrap` and are never taken for ranks."""
    import psutil

    try:
        root = proc.parent() if _spawn_worker(proc) else proc
        workers = [c for c in root.children() if _spawn_worker(c)] if root is not None else []
    except psutil.Error:
        return {}
    found: dict[int, dict[str, Any]] = {}
    for worker in workers:
        rank = _spawn_rank(worker.pid)
        if rank is not None:
            found[rank] = {"rank": rank, "pid": worker.pid, "host": socket.gethostname(), "world_size": len(workers),
                           "node_rank": None, "identity": {"JOB_ID": f"mp.spawn:{root.pid}"}, "created": 0.0}
    return found if len(found) >= 2 else {}


def _spawn_worker(proc: Any) -> bool:
    import psutil

    try:
        return "spawn_main" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def _spawn_rank(pid: int) -> int | None:
    from fieldguide.host.access import py_spy_dump

    try:
        done = py_spy_dump(pid, "--nonblocking", "--locals", timeout=10)
    except subprocess.TimeoutExpired:
        return None
    if done is None:
        return None
    match = SPAWN_WRAP.search(done.stdout)
    return int(match.group(1)) if match else None
