"""A neural-ODE regressor in bfloat16: a linear lift of 24 sensor readings into a
64-wide state, the state integrated through a learned vector field
(dh/dt = tanh(h * w + b)) with fixed-step explicit Euler, then a linear readout
predicting 4 future readings. Weights and activations are all bfloat16, the
model wrapped in `torch.compile`.

Problem: the solver takes many small steps (dt = 3e-3) on a state of magnitude
around one. In bfloat16 each increment is smaller than half a unit in the last
place of the state, so eager PyTorch, which rounds to bfloat16 after every op,
drops almost all of them. Inductor fuses the whole Euler chain into one kernel
that keeps float32 in registers, so the increments accumulate: the compiled
model computes a different function from the eager one, by far more than
bfloat16 rounding.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": "compile.mismatch", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SENSORS, STATE, HORIZON, BATCH = 24, 64, 4, 64
EULER_STEPS, DT = 100, 3e-3


class ODERegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Linear(SENSORS, STATE)
        self.norm = nn.LayerNorm(STATE)
        self.w = nn.Parameter(torch.randn(STATE) * 0.5)
        self.b = nn.Parameter(torch.randn(STATE) * 0.5)
        self.readout = nn.Linear(STATE, HORIZON)

    def forward(self, x):
        h = self.norm(self.lift(x))
        for _ in range(EULER_STEPS):
            h = h + DT * torch.tanh(h * self.w + self.b)
        return self.readout(h)


def sensor_windows(n, gen):
    """Readings of a few damped oscillators; targets are the next readings."""
    t = torch.arange(SENSORS + HORIZON).float()
    freq = 0.1 + 0.4 * torch.rand(n, 1, generator=gen)
    decay = 0.01 + 0.05 * torch.rand(n, 1, generator=gen)
    phase = 6.283 * torch.rand(n, 1, generator=gen)
    series = torch.exp(-decay * t) * torch.sin(freq * t + phase) + 0.05 * torch.randn(n, t.numel(), generator=gen)
    return series[:, :SENSORS], series[:, SENSORS:]


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    inputs, targets = sensor_windows(50_000, gen)
    inputs, targets = inputs.bfloat16(), targets.bfloat16()
    model = torch.compile(ODERegressor().bfloat16())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        idx = torch.randint(len(inputs), (BATCH,), generator=gen)
        loss = F.mse_loss(model(inputs[idx]).float(), targets[idx].float())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
