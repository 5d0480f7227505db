"""A DistributedDataParallel MLP on 2 CPU ranks (gloo), run under torchrun, whose ranks keep
pace until FIELDGUIDE_CHANGE_AFTER_S, when rank 1's host starts doing other work: each of its
steps takes 25 ms more (a co-tenant, a throttled core), and rank 0 waits in the gradient
all-reduce for it on every step from then on.

    python -m torch.distributed.run --nproc-per-node 2 rank_slows.py
"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

try:  # run as a file (the helper is beside it) or as a module (-m fieldguide.workloads.changing.X)
    from _change import CHANGE_AFTER_S, mark_change
except ModuleNotFoundError:
    from fieldguide.workloads.changing._change import CHANGE_AFTER_S, mark_change
from torch import nn
from torch.nn.parallel import DistributedDataParallel

WATCH = {"playbook": "slow-training", "cause": "dist.straggler", "modes": ["launch"],
         "python_args": ["-m", "torch.distributed.run", "--nproc-per-node", "2"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "600"))
DIM, CLASSES, BATCH = 256, 10, 64
SLOW_RANK, EXTRA_S, CHECK_EVERY = 1, 0.025, 8



def main():
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(DIM, 512), nn.GELU(), nn.Linear(512, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    started = time.monotonic()
    last_print, step, changed = started, 0, False
    try:
        while True:
            x = torch.randn(BATCH, DIM, generator=gen)
            y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
            if changed and rank == SLOW_RANK:
                time.sleep(EXTRA_S)  # the host's other work, off this process's CPU
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            now = time.monotonic()
            if step % CHECK_EVERY == 0:  # every rank changes, and stops, at the same step
                flags = torch.tensor([float(now - started >= CHANGE_AFTER_S), float(now - started >= SECONDS)])
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
                if flags[0].item() and not changed:
                    changed = True
                    if rank == 0:
                        mark_change(step)
                if flags[1].item():
                    break
            if rank == 0 and now - last_print >= 2:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = now
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
