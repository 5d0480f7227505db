"""A wide 3-layer MLP regressor trained on feature tensors held in memory.

Healthy and compute-bound: batches are sliced straight out of RAM, so the
matmuls dominate every step and there is nothing to fix.
"""
import itertools
import os
import time

import torch
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BATCH = 256


def main():
    torch.manual_seed(0)
    features = torch.randn(16384, 512)
    teacher = torch.randn(512, 16) / 16
    targets = torch.tanh(features @ teacher)

    model = nn.Sequential(
        nn.Linear(512, 1024), nn.GELU(),
        nn.Linear(1024, 1024), nn.GELU(),
        nn.Linear(1024, 16),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    loss_fn = nn.MSELoss()

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for epoch in itertools.count():
        order = torch.randperm(len(features))
        for start in range(0, len(order) - BATCH + 1, BATCH):
            idx = order[start:start + BATCH]
            x, y = features[idx], targets[idx]
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} epoch {epoch}", flush=True)
                last_print = now
            if now >= deadline:
                return


if __name__ == "__main__":
    main()
