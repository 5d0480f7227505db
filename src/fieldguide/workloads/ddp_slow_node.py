"""A DistributedDataParallel conv net classifying 32x32 colour images on CPU ranks (gloo), run
under torchrun on one node or several:

    python -m torch.distributed.run --nproc-per-node 2 ddp_slow_node.py
    python -m torch.distributed.run --nnodes 2 --node-rank N --nproc-per-node 2 \
        --master-addr HOST --master-port PORT ddp_slow_node.py

Problem: the ranks of the second half of the job (the last node's, on two nodes) run on slower
hardware (simulated: each step's compute costs them three times as much CPU), so every other
rank finishes its step early and waits in the gradient all-reduce for them. On one node of two
ranks that is rank 1, a straggler; on two nodes, a slow node whose ranks are even among
themselves.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "dist.straggler", "modes": ["launch"],
              "python_args": ["-m", "torch.distributed.run", "--nproc-per-node", "2"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BATCH, N, CHECK_EVERY = 48, 4096, 10
SLOWDOWN = 3  # the slow ranks' compute per step, relative to the others'


def on_slow_hardware(rank, world):
    return world > 1 and rank >= world // 2


def slower_hardware(model, images, labels):
    """The extra time slower hardware takes over the same step: its forward and backward again,
    (SLOWDOWN - 1) times, without an all-reduce (the gradients are cleared before the real one)."""
    with model.no_sync():
        for _ in range(SLOWDOWN - 1):
            F.cross_entropy(model(images), labels).backward()


def shard(rank):
    """This rank's images: noise with a faint class-dependent stripe, different on each rank."""
    gen = torch.Generator().manual_seed(1000 + rank)
    labels = torch.randint(0, 10, (N,), generator=gen)
    images = torch.randn(N, 3, 32, 32, generator=gen) * 0.5
    images[torch.arange(N), labels % 3] += labels.float().view(-1, 1, 1) / 10
    return images, labels


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 96, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(96, 10)

    def forward(self, x):
        return self.head(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


def train(rank):
    torch.manual_seed(0)
    slow = on_slow_hardware(rank, dist.get_world_size())
    images, labels = shard(rank)
    model = DistributedDataParallel(SmallConvNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        order = torch.randperm(N)
        for start in range(0, N - BATCH + 1, BATCH):
            idx = order[start:start + BATCH]
            if slow:
                slower_hardware(model, images[idx], labels[idx])
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(images[idx]), labels[idx])
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
