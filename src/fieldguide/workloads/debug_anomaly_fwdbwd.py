"""A small MLP regressor whose forward and backward alone run inside
`torch.autograd.detect_anomaly()`; the optimizer step is outside the `with`.

Problem: anomaly detection left on from a NaN hunt, scoped to the forward and
backward, so every autograd node records a Python traceback and backward checks
each gradient for NaNs. At the optimizer step, where a step ends, the switch
reads off: only a reading taken while the backward runs (or the NaN checks in
the op table) shows it.
"""
import os
import time

import torch
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.debug_mode", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, BATCH = 32, 64


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small model: one intra-op thread
    model = nn.Sequential(nn.Linear(FEATURES, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                          nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    w = torch.randn(FEATURES, 1)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        x = torch.randn(BATCH, FEATURES)
        y = torch.sin(x @ w) + 0.05 * torch.randn(BATCH, 1)
        opt.zero_grad(set_to_none=True)
        with torch.autograd.detect_anomaly():  # left in after chasing a NaN
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
        opt.step()
        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = now


if __name__ == "__main__":
    main()
