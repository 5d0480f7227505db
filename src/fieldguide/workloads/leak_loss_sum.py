"""An MLP regressor predicting house prices from synthetic tabular features, fed
by a plain generator of mini-batches (no DataLoader), with a running epoch loss
for the progress line.

Problem: the running total is taken from the loss tensor itself,
`epoch_loss += loss`, not from `loss.item()`. Every step's loss joins the total's
autograd graph, so the graph (one node per op of every step so far) is kept alive
across iterations and grows for the whole epoch. backward() frees each step's
saved tensors, so the resident set climbs only slowly: the leak is the graph.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, BATCH = 48, 512
STEPS_PER_EPOCH = 50_000  # a large table: an epoch outlasts the run


def batches(gen):
    """Endless mini-batches of (features, log-price): a noisy nonlinear function of the row."""
    w1 = torch.randn(FEATURES, 16, generator=gen) / FEATURES ** 0.5
    w2 = torch.randn(16, 1, generator=gen) / 4
    while True:
        x = torch.randn(BATCH, FEATURES, generator=gen)
        x[:, :8] = x[:, :8].abs().log1p()  # a few skewed "area"/"age" columns
        y = torch.tanh(x @ w1) @ w2 + 0.05 * torch.randn(BATCH, 1, generator=gen)
        yield x, y


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = nn.Sequential(
        nn.Linear(FEATURES, 512), nn.SiLU(), nn.Dropout(0.1),
        nn.Linear(512, 512), nn.SiLU(), nn.Dropout(0.1),
        nn.Linear(512, 256), nn.SiLU(),
        nn.Linear(256, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    data = batches(torch.Generator().manual_seed(1))

    deadline = time.monotonic() + SECONDS
    step, epoch = 0, 0
    try:
        while time.monotonic() < deadline:
            epoch_loss = 0.0
            for i in range(1, STEPS_PER_EPOCH + 1):
                x, y = next(data)
                loss = F.smooth_l1_loss(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                epoch_loss += loss  # the bug: should be loss.item()
                step += 1
                if step % 100 == 0:
                    print(f"step {step} epoch {epoch} loss {loss.item():.4f} "
                          f"running {epoch_loss.item() / i:.4f}", flush=True)
                if time.monotonic() >= deadline:
                    break
            epoch += 1
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
