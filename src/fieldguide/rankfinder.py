"""The ranks of a multi-rank job seen from outside: processes whose environment names a RANK in
the same job (TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT) as the given process, or as its
children when it is the launcher (torchrun, srun's step)."""

from __future__ import annotations

import socket
from typing import Any

JOB_KEYS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


def _identity(proc: Any) -> dict[str, str] | None:
    import psutil

    try:
        env: dict[str, str] = proc.environ()
    except (psutil.Error, OSError):
        return None
    if "RANK" not in env or int(env.get("WORLD_SIZE", "1") or 1) <= 1:
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
        rank = int(env["RANK"])
        # A DataLoader worker inherits its rank's environment: the rank is the oldest of them.
        try:
            created = candidate.create_time()
        except psutil.Error:
            continue
        if rank not in found or created < found[rank]["created"]:
            found[rank] = {"rank": rank, "pid": candidate.pid, "host": socket.gethostname(),
                           "world_size": int(env.get("WORLD_SIZE", "1")), "created": created}
    return [{k: v for k, v in found[r].items() if k != "created"} for r in sorted(found)]
