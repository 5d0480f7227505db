"""Time inside torch.distributed, per step, in a rank of a multi-rank job (WORLD_SIZE > 1).

Two signals, both on the training thread:
- the job's own collectives (all_reduce, barrier, broadcast, ...): the wall time of each call
  (an async_op call returns at once: only its launch is counted, its wait shows where it is waited on);
- DDP's gradient all-reduce, which runs inside backward() from C++ hooks: with CPU tensors
  (gloo) the training thread computes its backward itself, so the part of backward() it spends
  off the CPU (wall minus the thread's CPU time) is the wait for the other ranks' gradients.
  With CUDA the host does not wait there (DDP only orders streams), so that signal is not
  counted once CUDA is initialised.
In both, the time the training thread sat runnable waiting for a core (its run-queue time, from
/proc/thread-self/schedstat) is taken out: on a busy machine that is waiting for a CPU, not for
the other ranks, and a healthy job read it as communication (as attach mode, reading the same
counter from outside, does not).
Streams one row per step: [t_end, collective_s, backward_wait_s, backward_s, calls]. A rank is
known from torchrun's / srun's environment at start, or, for jobs that start their ranks
themselves (torch.multiprocessing.spawn), when init_process_group returns: then `identity`
streams its RANK and WORLD_SIZE and the timing starts.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..capability import Capability
from ..rows import CollectiveRow

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "broadcast", "barrier", "monitored_barrier", "reduce", "all_to_all", "all_to_all_single", "gather",
               "scatter", "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "NODE_RANK",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


# Slurm's names for the same facts, for ranks that `srun` starts itself (no torchrun): read where
# torchrun's are missing, never over them.
SLURM_ENV = {"RANK": "SLURM_PROCID", "WORLD_SIZE": "SLURM_NTASKS", "LOCAL_RANK": "SLURM_LOCALID",
             "NODE_RANK": "SLURM_NODEID", "LOCAL_WORLD_SIZE": "SLURM_NTASKS_PER_NODE"}


def job_identity(env: Mapping[str, str]) -> dict[str, str]:
    """A process's place in a multi-rank job from its environment, whoever started it: torchrun's
    variables (RANK, WORLD_SIZE, GROUP_RANK...), Lightning's (LOCAL_RANK and NODE_RANK, no RANK),
    or Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_NODEID, SLURM_LOCALID) for ranks `srun` started
    directly. RANK is filled in where it can be told; `JOB_ID` names the job (torchrun's run id,
    else Slurm's job and step) and NODE_RANK the node (torchrun's GROUP_RANK, else NODE_RANK,
    else SLURM_NODEID)."""
    identity = {k: str(env[k]) for k in RANK_ENV if k in env}
    for name, slurm in SLURM_ENV.items():
        if name not in identity and env.get(slurm):
            identity[name] = str(env[slurm]).split("(")[0]  # SLURM_NTASKS_PER_NODE may read "2(x3)"
    if "NODE_RANK" not in identity and "GROUP_RANK" in identity:
        identity["NODE_RANK"] = identity["GROUP_RANK"]
    if env.get("TORCHELASTIC_RUN_ID"):
        identity["JOB_ID"] = str(env["TORCHELASTIC_RUN_ID"])
    elif env.get("SLURM_JOB_ID"):
        identity["JOB_ID"] = f"slurm-{env['SLURM_JOB_ID']}" + (f".{env['SLURM_STEP_ID']}" if env.get("SLURM_STEP_ID") else "")
    rank = global_rank(identity)
    if rank is not None:
        identity["RANK"] = str(rank)
    return identity


def node_rank_of(identity: Mapping[str, Any]) -> int | None:
    """Which node of its job a rank is on (job_identity's NODE_RANK), None where not told."""
    try:
        return int(identity["NODE_RANK"]) if identity.get("NODE_RANK") not in (None, "") else None
    except (TypeError, ValueError):
        return None


def rank_identity() -> dict[str, str]:
    """This process's place in a multi-rank job (job_identity of its own environment)."""
    return job_identity(os.environ)


SCHEDSTAT = "/proc/thread-self/schedstat"
_schedstat_fds: dict[tuple[int, int], int] = {}  # (pid, thread): the open file, read again with pread (~1 µs)


def run_queue_seconds() -> float:
    """The calling thread's time runnable but waiting for a core so far (Linux schedstat's second
    field); 0.0 where the kernel does not keep it (then nothing is taken out). Keyed by pid too: a
    forked worker must not read its parent's thread through an inherited descriptor."""
    key = (os.getpid(), threading.get_ident())
    try:
        fd = _schedstat_fds.get(key)
        if fd is None:
            fd = _schedstat_fds[key] = os.open(SCHEDSTAT, os.O_RDONLY | os.O_CLOEXEC)
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def global_rank(env: dict[str, str]) -> int | None:
    """RANK, or where a framework's own launcher sets only LOCAL_RANK (Lightning's DDP re-runs the
    script with LOCAL_RANK, NODE_RANK and WORLD_SIZE), the rank it stands for."""
    try:
        if "RANK" in env:
            return int(env["RANK"])
        if "LOCAL_RANK" not in env or int(env.get("WORLD_SIZE", "1") or 1) <= 1:
            return None
        local, node = int(env["LOCAL_RANK"]), int(env.get("NODE_RANK") or env.get("GROUP_RANK") or 0)
        if node == 0:
            return local
        per_node = int(env.get("LOCAL_WORLD_SIZE") or 0)
        return node * per_node + local if per_node else None
    except ValueError:
        return None


class Collectives(Capability):
    name = "collectives"
    streams = ("steps", "identity")

    def start(self) -> None:
        self.rows = self.agent.stream(self.name, "steps")
        self.identity = self.agent.stream(self.name, "identity")
        identity = rank_identity()
        self.active = int(identity.get("WORLD_SIZE", "1") or 1) > 1
        self.collective_s = self.backward_wait_s = self.backward_s = 0.0
        self.waited_total_s = 0.0  # every wait for the other ranks so far, never reset (the op profile's window)
        self.calls = 0
        self.depth = 0  # a collective that calls another (all_gather_object) is counted once
        self.torch: ModuleType | None = None

    def hook_torch(self, torch: ModuleType) -> None:
        self.torch = torch
        distributed = getattr(torch, "distributed", None)
        if self.active:
            self.activate(torch)
        if distributed is not None and distributed.is_available():
            self.wrap_init(distributed)

    def wrap_init(self, distributed: ModuleType) -> None:
        """A job that starts its own ranks: it is one once its process group has more than one. The
        process group says the rank exactly, also where the environment left it to be inferred."""
        original = distributed.init_process_group
        capability = self

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            try:
                world = distributed.get_world_size()
                if world > 1 and capability.torch is not None:
                    capability.identity.append({**rank_identity(), "RANK": str(distributed.get_rank()),
                                                "WORLD_SIZE": str(world)})
                    if not capability.active:
                        capability.active = True
                        capability.activate(capability.torch)
            except Exception:
                pass
            return result

        init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(distributed, "init_process_group", init_process_group)  # noqa: B010 (mypy: no such attribute in its stubs)

    def activate(self, torch: ModuleType) -> None:
        self.wrap_backward(torch)
        distributed = getattr(torch, "distributed", None)
        if distributed is not None and distributed.is_available():
            c10d = getattr(distributed, "distributed_c10d", None)
            for name in COLLECTIVES:
                original = getattr(distributed, name, None)
                if original is None:
                    continue
                timed = self.timed(original)
                setattr(distributed, name, timed)
                if c10d is not None and getattr(c10d, name, None) is original:
                    setattr(c10d, name, timed)
        self.agent.add_step_listener(self)

    def timed(self, original: Any) -> Any:
        capability = self

        def collective(*args: Any, **kwargs: Any) -> Any:
            capability.depth += 1
            started, queued = time.monotonic(), run_queue_seconds()
            try:
                return original(*args, **kwargs)
            finally:
                capability.depth -= 1
                if capability.depth == 0:
                    waited = max(time.monotonic() - started - (run_queue_seconds() - queued), 0.0)
                    capability.collective_s += waited
                    capability.waited_total_s += waited
                    capability.calls += 1

        collective.__wrapped__ = original  # type: ignore[attr-defined]
        collective.__name__ = getattr(original, "__name__", "collective")
        collective.__doc__ = getattr(original, "__doc__", None)
        return collective

    def wrap_backward(self, torch: ModuleType) -> None:
        base = torch.autograd.backward
        capability = self

        def backward(*args: Any, **kwargs: Any) -> Any:
            wall, cpu, queued = time.monotonic(), time.thread_time(), run_queue_seconds()
            try:
                return base(*args, **kwargs)
            finally:
                wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
                capability.backward_s += wall
                if not capability.cuda_in_use():  # off the CPU, less the time it waited for a core
                    waited = max(wall - cpu - (run_queue_seconds() - queued), 0.0)
                    capability.backward_wait_s += waited
                    capability.waited_total_s += waited

        backward.__wrapped__ = base  # type: ignore[attr-defined]
        torch.autograd.backward = backward

    def cuda_in_use(self) -> bool:
        try:
            return self.torch is not None and bool(self.torch.cuda.is_initialized())
        except Exception:
            return False

    def on_step(self) -> None:
        self.rows.append(CollectiveRow(time.monotonic(), round(self.collective_s, 6), round(self.backward_wait_s, 6),
                                       round(self.backward_s, 6), self.calls))
        self.collective_s = self.backward_wait_s = self.backward_s = 0.0
        self.calls = 0


CAPABILITY = Collectives
