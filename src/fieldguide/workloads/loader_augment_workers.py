"""An MLP classifying 28x28 glyphs that are randomly rotated and elastically
warped per sample in pure Python, with 2 DataLoader workers on a 2-core box.

Problem: the augmentation is CPU-heavy Python math; both workers saturate the
cores and still cannot produce batches as fast as the model consumes them.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
S = 28


def glyph(label, rng):
    """A crude stroke pattern per class, as a flat Python list."""
    cx, cy, rad = 14 + rng.uniform(-2, 2), 14 + rng.uniform(-2, 2), 4 + label
    return [1.0 if abs(math.hypot(c - cx, r - cy) - rad) < 1.5 or (label % 2 and abs(c - r) < 1.2)
            else 0.0 for r in range(S) for c in range(S)]


def rotate_and_warp(img, angle, amp, rng_phase):
    """Bilinear resampling under rotation plus a sinusoidal elastic displacement."""
    ca, sa = math.cos(angle), math.sin(angle)
    out = [0.0] * (S * S)
    for r in range(S):
        for c in range(S):
            x, y = c - 13.5, r - 13.5
            sx = ca * x - sa * y + 13.5 + amp * math.sin(0.5 * r + rng_phase)
            sy = sa * x + ca * y + 13.5 + amp * math.cos(0.5 * c + rng_phase)
            x0, y0 = math.floor(sx), math.floor(sy)
            fx, fy = sx - x0, sy - y0
            v = 0.0
            for yy, wy in ((y0, 1 - fy), (y0 + 1, fy)):
                for xx, wx in ((x0, 1 - fx), (x0 + 1, fx)):
                    if 0 <= xx < S and 0 <= yy < S:
                        v += wx * wy * img[yy * S + xx]
            out[r * S + c] = v
    return out


class AugmentedGlyphs(Dataset):
    def __init__(self, n=2048):
        rng = random.Random(0)
        self.items = [(glyph(i % 10, rng), i % 10) for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        img, label = self.items[i]
        rng = random.Random(i * 7919 + time.monotonic_ns())
        for _ in range(3):  # rotate+warp, then two smaller jitter passes
            img = rotate_and_warp(img, rng.uniform(-0.5, 0.5), rng.uniform(0, 1.5), rng.uniform(0, 6.3))
        return torch.tensor(img), label


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # leave the cores to the two loader workers
    loader = DataLoader(AugmentedGlyphs(), batch_size=32, shuffle=True, num_workers=2)
    model = nn.Sequential(nn.Linear(S * S, 512), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for epoch in range(1000):
        for _i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} epoch {epoch}", flush=True)
                last_print = time.monotonic()
            if time.monotonic() >= deadline:
                return


if __name__ == "__main__":
    main()
