"""A two-tower recommender (user and item embeddings, dot-product score) trained
on synthetic click logs with a DataLoader, in a CPU node slot with a memory cap.

The item table is large (1M items x 64 floats, 256 MB) with dense gradients, the
batch tiny (32 interactions), and the optimizer is Adam with AMSGrad, which keeps
three tensors the size of every parameter (exp_avg, exp_avg_sq, max_exp_avg_sq).
After building the model the job caps its own address space the way `ulimit -v`
on the node would: what it maps now plus 1152 MB.

Problem: the weights and their gradient fit the slot; Adam's state, three more
copies of the table, does not leave room for the update's temporaries: the first
`opt.step()` runs out of memory. The activations are a few KB.
"""
import os
import resource
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.optimizer_state", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
USERS, ITEMS, DIM, BATCH = 20_000, 1_000_000, 64, 32
HEADROOM = 1152 << 20  # bytes of address space the slot allows above the start-up footprint


class TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.users = nn.Embedding(USERS, DIM)
        self.items = nn.Embedding(ITEMS, DIM)  # dense gradients: a full-table .grad every step
        self.user_mlp = nn.Sequential(nn.Linear(DIM, DIM), nn.ReLU(), nn.Linear(DIM, DIM))

    def forward(self, user, item):
        return (self.user_mlp(self.users(user)) * self.items(item)).sum(-1)


def click_log(n, gen):
    """Clicks driven by hidden user and item tastes; popular items come up more often."""
    user = torch.randint(USERS, (n,), generator=gen)
    item = (torch.rand(n, generator=gen) ** 3 * ITEMS).long()
    taste = torch.sin(user.float() * 0.01) * torch.cos(item.float() * 0.001)
    click = (taste + 0.3 * torch.randn(n, generator=gen) > 0).float()
    return TensorDataset(user, item, click)


def vm_size():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    loader = DataLoader(click_log(200_000, torch.Generator().manual_seed(1)), batch_size=BATCH, shuffle=True)
    model = TwoTower()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
    cap = vm_size() + HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    print(f"address space capped at {cap >> 20} MB", flush=True)

    deadline = time.monotonic() + SECONDS
    step = 0
    for epoch in range(1000):
        for user, item, click in loader:
            loss = F.binary_cross_entropy_with_logits(model(user, item), click)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step} epoch {epoch} loss {loss.item():.4f}", flush=True)
            if time.monotonic() >= deadline:
                return


if __name__ == "__main__":
    main()
