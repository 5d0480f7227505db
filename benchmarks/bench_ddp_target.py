"""A steady 2-rank DDP training loop (gloo, CPU) that reports each rank's throughput: one JSON
line {"t", "steps", "rank"} per rank every quarter second.

usage: python -m torch.distributed.run --nproc-per-node 2 benchmarks/bench_ddp_target.py

Used by ranks.py: an MLP step of ~10 ms per rank on batches sliced from tensors in RAM, one
intra-op thread per rank. BENCH_DEVICE_WAIT_MS adds a sleep to each step: a rank that waits
on its device that long, off the CPU, as ranks on a GPU node do. Every rank stops at the same step (a shared flag every 10 steps), and
a rank whose launcher is gone (killed outright) ends too.
"""

import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

BATCH, N, CHECK_EVERY = 512, 8192, 10


def end_with_launcher() -> None:
    """A launcher killed outright (SIGKILL) leaves its workers running: end this rank with it."""
    launcher = os.getppid()

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def main() -> None:
    if "LOCAL_RANK" not in os.environ:
        sys.exit(f"run under torchrun: python -m torch.distributed.run --nproc-per-node 2 {sys.argv[0]}")
    torch.set_num_threads(1)
    end_with_launcher()
    seconds = float(os.environ.get("BENCH_SECONDS", "60"))
    device_wait = float(os.environ.get("BENCH_DEVICE_WAIT_MS", "0")) / 1000
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    x = torch.randn(N, 256)
    y = torch.randint(0, 10, (N,))
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = last = time.monotonic()
    steps = 0
    try:
        while True:
            order = torch.randperm(N)
            for i in range(0, N - BATCH + 1, BATCH):
                idx = order[i:i + BATCH]
                loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()  # DDP all-reduces the gradients here
                opt.step()
                if device_wait:
                    time.sleep(device_wait)  # off the CPU, as a rank is while it waits on its GPU
                steps += 1
                now = time.monotonic()
                if now - last >= 0.25:
                    print(json.dumps({"t": now, "steps": steps, "rank": rank}), flush=True)
                    last = now
                if steps % CHECK_EVERY == 0:
                    done = torch.tensor([1.0 if now - start >= seconds else 0.0])
                    dist.all_reduce(done, op=dist.ReduceOp.MAX)
                    if done.item():
                        return
    except RuntimeError as err:  # a peer left mid-collective
        sys.exit(f"rank {rank}: stopped, a peer left ({str(err).splitlines()[0][:120]})")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
