"""An image classifier (a small convnet) whose loop takes its next batch right after
the forward, as trainers do to overlap input with the device's work; batches come
from a `fetch_batch()` that reads an object store (no DataLoader).

Problem: each fetch waits ~30 ms on the store's latency, on the training thread,
between the forward and the backward: most of each step is spent waiting for data.
The wait is not between steps, where a loop is usually looked at for its input.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
STORE_LATENCY_S = 0.03  # one round trip to the (simulated) object store per batch
BATCH = 16


class SmallConvNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.head = nn.Linear(32 * 16, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def fetch_batch(gen):
    """BATCH images with their labels, from the store."""
    time.sleep(STORE_LATENCY_S)  # the request's latency: waiting, not CPU
    images = torch.rand(BATCH, 3, 32, 32, generator=gen)
    return images, torch.randint(0, 10, (BATCH,), generator=gen)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    gen = torch.Generator().manual_seed(1)
    model = SmallConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    x, y = fetch_batch(gen)
    step = 0
    while time.monotonic() < deadline:
        loss = F.cross_entropy(model(x), y)
        x, y = fetch_batch(gen)  # the next batch, while the device would still run the forward
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
