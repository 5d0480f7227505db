"""A "learned gating chain": 240 tiny per-feature gate/shift vectors applied one
after another to a 4x16 input, trained with per-parameter (foreach=False) Adam.

Problem: forward, backward and the optimizer are all hundreds of elementwise
ops on 16-element tensors, so each step is thousands of ops that each take
a few microseconds: pure host overhead.
"""
import os
import time

import torch
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.overhead_bound", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
DEPTH, WIDTH = 120, 16


class GateChain(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = nn.ParameterList(nn.Parameter(torch.randn(WIDTH) * 0.1) for _ in range(DEPTH))
        self.shifts = nn.ParameterList(nn.Parameter(torch.zeros(WIDTH)) for _ in range(DEPTH))

    def forward(self, x):
        for gate, shift in zip(self.gates, self.shifts, strict=False):
            x = x + torch.sigmoid(gate) * torch.tanh(x + shift)
            x = x * 0.5
        return x


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # 16-element tensors: threads would only add overhead
    model = GateChain()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    target_map = torch.randn(WIDTH, WIDTH) / 4

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        x = torch.randn(4, WIDTH)
        y = torch.tanh(x @ target_map)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
