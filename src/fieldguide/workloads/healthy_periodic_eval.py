"""A small conv net classifying synthetic 32x32 texture images held in memory, with a short
evaluation every 50 steps: `model.eval()`, `torch.no_grad()`, four held-out batches, then
`model.train()` again.

Healthy and compute-bound: batches are sliced out of RAM, the convolutions dominate every
step, and the evaluation is a few forward passes every 50 steps, a small and expected share.
There is nothing to fix.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
the evaluation ~3% of the wall time, slicing the batch under 1%, forward/backward/update the rest
(54-62 ms steps at load 3.3). Under torch.profiler: ~120 top-level aten ops a step, 95% of the
step inside them.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
SIDE, CLASSES, BATCH, EVAL_EVERY, EVAL_BATCHES = 32, 8, 32, 50, 4


def textures(n, generator):
    """Images of oriented stripes plus noise: the class is the stripes' orientation and frequency."""
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    angle = (labels % 4).float() * (torch.pi / 4)
    freq = 0.3 + 0.25 * (labels // 4).float()
    r = torch.arange(SIDE).float()
    grid_y, grid_x = torch.meshgrid(r, r, indexing="ij")
    phase = torch.cos(angle).view(-1, 1, 1) * grid_x + torch.sin(angle).view(-1, 1, 1) * grid_y
    images = torch.sin(freq.view(-1, 1, 1) * phase) + 1.5 * torch.randn(n, SIDE, SIDE, generator=generator)
    return images.unsqueeze(1), labels


def evaluate(model, x_val, y_val):
    model.eval()
    correct = 0
    with torch.no_grad():
        for k in range(EVAL_BATCHES):
            xb, yb = x_val[k * BATCH:(k + 1) * BATCH], y_val[k * BATCH:(k + 1) * BATCH]
            correct += (model(xb).argmax(1) == yb).sum().item()
    model.train()
    return correct / (EVAL_BATCHES * BATCH)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_train, y_train = textures(8192, g)
    x_val, y_val = textures(EVAL_BATCHES * BATCH, g)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(64 * 4, CLASSES),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    spent = {"eval": 0.0, "input": 0.0}
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, t0, accuracy = 0, time.perf_counter(), 0.0
    while time.monotonic() < deadline:
        a = time.perf_counter()
        i = (step * BATCH) % (len(x_train) - BATCH)
        xb, yb = x_train[i:i + BATCH], y_train[i:i + BATCH]
        b = time.perf_counter()
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        c = time.perf_counter()
        if step % EVAL_EVERY == 0:
            accuracy = evaluate(model, x_val, y_val)
        spent["input"] += b - a
        spent["eval"] += time.perf_counter() - c
        if step == 10:  # shares from step 10 on: past the first steps' warm-up
            t0, spent = time.perf_counter(), dict.fromkeys(spent, 0.0)
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f} eval accuracy {accuracy:.3f}", flush=True)
            if TIMING and step > 10:
                wall = time.perf_counter() - t0
                print("  " + " ".join(f"{k} {v / wall:.0%}" for k, v in spent.items())
                      + f" step {wall / (step - 10) * 1e3:.1f} ms", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
