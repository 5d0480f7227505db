"""A deep, narrow residual MLP (12 blocks of LayerNorm -> Linear -> GELU -> Linear, with a
learned per-channel scale, a residual add and a dropout in each) regressing a smooth target
from features held in memory.

Healthy and compute-bound, though it runs many ops: each step is well over 1000 aten ops
(forward, backward and a per-parameter AdamW update over 88 tensors), each small, yet the
batch is big enough that most of the step is spent inside them, not in Python or dispatch
between them. There is nothing to fix.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
slicing the batch under 1% of the wall time, forward/backward/update the rest (63-75 ms steps at
load 3.6). Under torch.profiler: 1356 top-level aten ops a step (4075 with nested ones), median
2.7 us, and 91% of the step inside them.
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
WIDTH, BLOCKS, BATCH = 128, 12, 512


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)
        self.scale = nn.Parameter(torch.full((WIDTH,), 0.1))

    def forward(self, x):
        h = self.down(F.gelu(self.up(self.norm(x))))
        return x + F.dropout(h * self.scale, p=0.05, training=self.training)


def main():
    torch.manual_seed(0)
    features = torch.randn(32768, WIDTH)
    targets = torch.sin(features[:, :4].sum(1, keepdim=True)) * torch.cos(features[:, 4:8]).mean(1, keepdim=True)
    model = nn.Sequential(*[Block() for _ in range(BLOCKS)], nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=False)

    spent = {"input": 0.0}
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, t0 = 0, time.perf_counter()
    while time.monotonic() < deadline:
        a = time.perf_counter()
        i = (step * BATCH) % (len(features) - BATCH)
        x, y = features[i:i + BATCH], targets[i:i + BATCH]
        b = time.perf_counter()
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        spent["input"] += b - a
        if step == 10:  # shares from step 10 on: past the first steps' warm-up
            t0, spent = time.perf_counter(), dict.fromkeys(spent, 0.0)
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            if TIMING and step > 10:
                wall = time.perf_counter() - t0
                print("  " + " ".join(f"{k} {v / wall:.0%}" for k, v in spent.items())
                      + f" step {wall / (step - 10) * 1e3:.1f} ms", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
