"""A DistributedDataParallel MLP on 2 CPU ranks (gloo), run under torchrun:

    python -m torch.distributed.run --nproc-per-node 2 ddp_straggler_input.py

Each rank reads its own shard of the data through `get_batch()`. Rank 0's shard is
in RAM; rank 1's shard sits on slow remote storage, where every chunk of records
is a blocking read with a fixed latency.

Problem: rank 1 spends about four times rank 0's compute waiting for its input,
so every step rank 0 finishes its backward early and waits in DDP's gradient
all-reduce for rank 1: the whole job runs at the pace of its slowest rank.
"""
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "dist.straggler", "modes": ["launch", "attach"],
              "python_args": ["-m", "torch.distributed.run", "--nproc-per-node", "2"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
DIM, CLASSES, BATCH, N = 512, 16, 128, 16384
SLOW_RANK, CHUNK, READ_LATENCY_S = 1, 16, 0.012  # rank 1: 8 reads of 16 records, 12 ms each
CHECK_EVERY = 8  # steps between the ranks' check of the deadline


def shard(rank):
    """This rank's records: Gaussian clusters, different on each rank."""
    gen = torch.Generator().manual_seed(1000 + rank)
    centers = torch.randn(CLASSES, DIM, generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, CLASSES, (N,), generator=gen)
    return centers[labels] + torch.randn(N, DIM, generator=gen), labels


def get_batch(features, labels, rank, step):
    """The next BATCH records of this rank's shard; rank 1 reads them from slow storage."""
    start = (step * BATCH) % (N - BATCH)
    if rank == SLOW_RANK:
        parts = []
        for at in range(start, start + BATCH, CHUNK):
            time.sleep(READ_LATENCY_S)  # one blocking round trip to the remote mount per chunk
            parts.append(features[at:at + CHUNK].clone())
        return torch.cat(parts), labels[start:start + BATCH].clone()
    return features[start:start + BATCH], labels[start:start + BATCH]


def train(rank):
    torch.manual_seed(0)
    features, labels = shard(rank)
    model = DistributedDataParallel(nn.Sequential(
        nn.Linear(DIM, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, CLASSES)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        x, y = get_batch(features, labels, rank, step)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        step += 1
        now = time.monotonic()
        if rank == 0 and now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = now
        # Every rank stops at the same step, or one would wait forever in the next all-reduce.
        if step % CHECK_EVERY == 0:
            done = torch.tensor([1.0 if now >= deadline else 0.0])
            dist.all_reduce(done, op=dist.ReduceOp.MAX)
            if done.item():
                return


def end_with_launcher():
    """A launcher killed outright (SIGKILL) leaves its workers running: end this rank with it."""
    launcher = os.getppid()

    def watch():
        while os.getppid() == launcher:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def main():
    if "LOCAL_RANK" not in os.environ:
        sys.exit(f"run under torchrun: python -m torch.distributed.run --nproc-per-node 2 {sys.argv[0]}")
    torch.set_num_threads(1)  # one intra-op thread per rank (2 ranks on a small box)
    end_with_launcher()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        train(rank)
    except KeyboardInterrupt:
        sys.exit(130)
    except RuntimeError as err:  # a peer left mid-collective: it was stopped, or it died
        sys.exit(f"rank {rank}: stopped, a peer left ({str(err).splitlines()[0][:120]})")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
