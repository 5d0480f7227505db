"""A 1-D conv net classifying simulated accelerometer traces (walking, running,
cycling, idle ...), with gradient accumulation over 4 micro-batches per optimizer
step, and no DataLoader.

Problem: every micro-batch is synthesized by `simulate_micro_batch()` in pure Python
(a per-sample motion model integrated sample by sample with `math`), on the
training thread: making the input costs more CPU than the model's own step.
"""
import math
import os
import random
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
ACTIVITIES = 6
LENGTH, MICRO_BATCH, ACCUMULATE = 128, 16, 4
RATE_HZ = 50.0


def simulate_trace(activity, rng):
    """One 3-axis trace: a cadence oscillator with drift, jerk noise and a gravity axis."""
    cadence = 0.3 + 0.45 * activity + rng.uniform(-0.1, 0.1)
    amp = 0.2 + 0.3 * (activity % 3)
    phase, drift, xs, ys, zs = rng.uniform(0, 2 * math.pi), 0.0, [], [], []
    for i in range(LENGTH):
        t = i / RATE_HZ
        drift = 0.98 * drift + rng.gauss(0.0, 0.02)
        step = math.sin(2 * math.pi * cadence * t + phase)
        xs.append(amp * step + drift)
        ys.append(0.5 * amp * math.sin(4 * math.pi * cadence * t + phase) + rng.gauss(0.0, 0.05))
        zs.append(1.0 + 0.3 * amp * abs(step) + rng.gauss(0.0, 0.05))
    return [xs, ys, zs]


def simulate_micro_batch(rng):
    labels = [rng.randrange(ACTIVITIES) for _ in range(MICRO_BATCH)]
    traces = [simulate_trace(a, rng) for a in labels]
    return torch.tensor(traces), torch.tensor(labels)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    model = nn.Sequential(
        nn.Conv1d(3, 64, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(64, 128, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(128, 128, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(4),
        nn.Flatten(), nn.Linear(128 * 4, 256), nn.ReLU(), nn.Linear(256, ACTIVITIES),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(ACCUMULATE):
            x, y = simulate_micro_batch(rng)
            loss = F.cross_entropy(model(x), y) / ACCUMULATE
            loss.backward()
            total += loss.item()
        opt.step()
        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {total:.4f}", flush=True)
            last_print = now
        if now >= deadline:
            break


if __name__ == "__main__":
    main()
