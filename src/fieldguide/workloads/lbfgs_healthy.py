"""An MLP surrogate model fitted to a synthetic physics-like response surface with
torch.optim.LBFGS: each step calls a closure (forward + backward) a few times.

Healthy and compute-bound: the inputs live in RAM, each step fits one large chunk of
them, and the closures' matmuls dominate the step. LBFGS's own vector work over a
short history is a small share.
"""
import os
import time

import torch
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
DIM, OUT, CHUNK, N = 64, 8, 512, 16384


def response(x):
    """A smooth, coupled target: damped oscillations of linear mixes of the inputs."""
    g = torch.Generator().manual_seed(3)
    mix = torch.randn(DIM, OUT, generator=g) / DIM ** 0.5
    z = x @ mix
    return torch.sin(3 * z) * torch.exp(-0.3 * z * z) + 0.1 * z


def main():
    torch.manual_seed(0)
    x = torch.rand(N, DIM) * 2 - 1
    y = response(x)
    model = nn.Sequential(nn.Linear(DIM, 512), nn.Tanh(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, OUT))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4, history_size=8)
    loss_fn = nn.MSELoss()

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        start = (step * CHUNK) % N
        xb, yb = x[start:start + CHUNK], y[start:start + CHUNK]

        def closure(xb=xb, yb=yb):
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            return loss

        loss = opt.step(closure)
        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
            last_print = now
        if now >= deadline:
            break


if __name__ == "__main__":
    main()
