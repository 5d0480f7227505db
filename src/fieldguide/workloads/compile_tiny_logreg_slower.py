"""A click-through-rate model: logistic regression over 40 standardized ad and
user features, trained online with SGD on mini-batches of 16 impressions, the
model wrapped in `torch.compile`.

Problem: the model is one 40x1 matrix product and a sigmoid. There is nothing
for the compiler to fuse or speed up, while every call now also pays for guard
checks and the compiled-graph wrappers (forward and backward): the compiled
step is no faster than plain eager, slower if anything, and the compile itself
was pure cost.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": "compile.slower", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, BATCH = 40, 16


class ClickModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 1)

    def forward(self, x):
        return self.linear(x).squeeze(1)


def impressions(n, gen):
    true_w = torch.randn(FEATURES, generator=gen) * 0.5
    x = torch.randn(n, FEATURES, generator=gen)
    clicked = (torch.rand(n, generator=gen) < torch.sigmoid(x @ true_w - 1.0)).float()
    return x, clicked


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    features, clicks = impressions(200_000, gen)
    model = torch.compile(ClickModel())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-4)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, start = 0, 0
    while time.monotonic() < deadline:
        if start + BATCH > len(features):
            start = 0
        x, y = features[start:start + BATCH], clicks[start:start + BATCH]
        start += BATCH
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
