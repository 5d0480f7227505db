"""A small convolutional classifier for 10 synthetic texture classes, trained
with multi-scale augmentation: every step the batch is resized to a size drawn
from a list of twelve resolutions, as scale-robust detectors are trained.

Problem: the model is wrapped in `torch.compile(model, dynamic=False)`, so every
input resolution it has not seen yet is a new static shape and triggers a fresh
compile of the forward (and its backward). After eight of them the frame hits
dynamo's recompile limit and silently falls back to eager for the rest of the
run: the job paid for eight compiles and trains uncompiled anyway.
"""
import os
import random
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": "compile.recompiles", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BATCH, CLASSES, BASE = 16, 10, 32
SCALES = [24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 72]  # multi-scale training resolutions


def textures(n, gen):
    """Images of oriented stripes: the class is the stripe frequency/orientation pair."""
    labels = torch.randint(CLASSES, (n,), generator=gen)
    ys, xs = torch.meshgrid(torch.linspace(0, 1, BASE), torch.linspace(0, 1, BASE), indexing="ij")
    freq = 2.0 + (labels % 5).float().view(-1, 1, 1) * 1.5
    angle = (labels // 5).float().view(-1, 1, 1) * 1.2
    phase = xs * torch.cos(angle) + ys * torch.sin(angle)
    base = torch.sin(6.283 * freq * phase)
    images = torch.stack([base, base.roll(3, dims=1), -base], dim=1)
    return images + 0.3 * torch.randn(images.shape, generator=gen), labels


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(2)
    images, labels = textures(4096, gen)
    model = torch.compile(ConvNet(), dynamic=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        idx = torch.randint(len(images), (BATCH,), generator=gen)
        size = rng.choice(SCALES)
        x = F.interpolate(images[idx], size=(size, size), mode="bilinear", align_corners=False)
        loss = F.cross_entropy(model(x), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} size {size} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
