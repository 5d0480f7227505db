"""A wide, shallow DistributedDataParallel network on 2 CPU ranks (gloo), run under torchrun:

    python -m torch.distributed.run --nproc-per-node 2 ddp_comm_bound.py

Four 2048x2048 layers side by side hold ~67 MB of parameters, and each rank trains
them on one row at a time, held in RAM (a micro-batch of 1, as in large-model fine-tuning).

Problem: the compute per step is tiny next to the gradients: every step each rank
all-reduces ~67 MB of gradients, and that communication, the same on both ranks,
takes most of the step (DDP already overlaps it with backward and keeps the
gradients in its buckets). No rank is slower than the other; the collective sets the pace.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "dist.comm_bound", "modes": ["launch", "attach"],
              "python_args": ["-m", "torch.distributed.run", "--nproc-per-node", "2"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
WIDTH, LAYERS, BATCH, N = 2048, 4, 1, 4096
CHECK_EVERY = 4  # steps between the ranks' check of the deadline


def shard(rank):
    """This rank's rows and regression targets, different on each rank."""
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(N, WIDTH, generator=gen)
    return x, torch.tanh(x[:, :WIDTH // 4].sum(dim=1, keepdim=True) / 16)


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x):
        # Side by side over the same input, summed: the backward is little more than each
        # layer's weight gradient, so the 67 MB of gradients cost the least compute possible.
        return self.head(sum(F.relu(layer(x)) for layer in self.layers))


def train(rank):
    torch.manual_seed(0)
    features, targets = shard(rank)
    # Gradients as views into DDP's buckets: no copy in or out, the compute is as lean as it gets.
    model = DistributedDataParallel(Wide(), gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        start = (step * BATCH) % (N - BATCH)
        loss = F.mse_loss(model(features[start:start + BATCH]), targets[start:start + BATCH])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces ~67 MB of gradients here
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
