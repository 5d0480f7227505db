"""A 2-layer GRU forecasting the next values of noisy multi-channel sine waves,
with the whole loop still inside `torch.autograd.detect_anomaly()`.

Problem: anomaly detection (context-manager form) left on from a NaN hunt, so
every autograd node records a Python traceback and backward checks for NaNs.
"""
import itertools
import math
import os
import time

import torch
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.debug_mode", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
CHANNELS, SEQ, BATCH = 4, 24, 32


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(CHANNELS, 64, num_layers=2, batch_first=True)
        self.out = nn.Linear(64, CHANNELS)

    def forward(self, x):
        h, _ = self.gru(x)
        return self.out(h)


def get_batch():
    t = torch.arange(SEQ + 1, dtype=torch.float32)
    freq = torch.rand(BATCH, 1, CHANNELS) * 0.3 + 0.05
    phase = torch.rand(BATCH, 1, CHANNELS) * 2 * math.pi
    waves = torch.sin(t.view(1, -1, 1) * freq + phase)
    waves = waves + 0.05 * torch.randn_like(waves)
    return waves[:, :-1], waves[:, 1:]


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small GRU: one intra-op thread
    model = Forecaster()
    opt = torch.optim.RMSprop(model.parameters(), lr=2e-3)
    loss_fn = nn.SmoothL1Loss()

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    with torch.autograd.detect_anomaly():  # left in after chasing a NaN
        for step in itertools.count(1):
            x, y = get_batch()
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = now
            if now >= deadline:
                break


if __name__ == "__main__":
    main()
