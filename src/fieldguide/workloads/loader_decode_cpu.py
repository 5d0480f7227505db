"""A small conv net on 48x48 grayscale images stored in a toy compressed format
(delta + run-length coded, quantised) that is decoded in pure Python per sample.

Problem: the hand-written decoder costs a few ms of CPU per sample inside
`__getitem__` with `num_workers=0`, so the main process is busy decoding.
"""
import math
import os
import random
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SIDE = 48


def encode(pixels):
    """Delta-code a row-major list of 0..63 levels, then run-length the deltas."""
    runs, prev = [], 0
    for p in pixels:
        d = p - prev
        prev = p
        if runs and runs[-1][0] == d and runs[-1][1] < 255:
            runs[-1][1] += 1
        else:
            runs.append([d, 1])
    return [tuple(r) for r in runs]


def decode(runs):
    """Undo run-length + delta coding, dequantise with a gamma curve, then deblock."""
    levels, value = [], 0
    for delta, count in runs:
        for _ in range(count):
            value += delta
            levels.append(value)
    img = [math.pow(v / 63.0, 2.2) for v in levels]
    out = []
    for r in range(SIDE):  # 3x3 box "deblocking" filter, clipped at the borders
        rows = [rr * SIDE for rr in (r - 1, r, r + 1) if 0 <= rr < SIDE]
        for c in range(SIDE):
            cols = [cc for cc in (c - 1, c, c + 1) if 0 <= cc < SIDE]
            out.append(sum(img[b + cc] for b in rows for cc in cols) / (len(rows) * len(cols)))
    return out


class CompressedImages(Dataset):
    def __init__(self, n=512):
        rng = random.Random(0)
        self.items = []
        for i in range(n):
            label = i % 10
            fx, fy = 0.1 + 0.05 * label, rng.uniform(0.05, 0.5)
            pixels = [int(31.5 + 31.5 * math.sin(fx * c) * math.cos(fy * r))
                      for r in range(SIDE) for c in range(SIDE)]
            self.items.append((encode(pixels), label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        runs, label = self.items[i]
        return torch.tensor(decode(runs)).view(1, SIDE, SIDE), label


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small model, single-threaded kernels
    loader = DataLoader(CompressedImages(), batch_size=16, shuffle=True, num_workers=0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, batches = 0, iter(loader)
    while time.monotonic() < deadline:
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            continue
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
