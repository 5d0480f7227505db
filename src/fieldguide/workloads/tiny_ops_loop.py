"""A hand-written Elman RNN cell unrolled in a Python loop over 300-step
sequences, with hidden size 16 and batch size 2, trained to track a running mean.

Problem: every step is thousands of microsecond-sized ops (a few matmuls and
adds per timestep, forward and backward), so Python/dispatch overhead dominates.
"""
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.overhead_bound", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SEQ, IN, HID = 300, 4, 16


class LoopRNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w_in = nn.Parameter(torch.randn(IN, HID) * 0.3)
        self.w_rec = nn.Parameter(torch.randn(HID, HID) * 0.2)
        self.bias = nn.Parameter(torch.zeros(HID))
        self.readout = nn.Linear(HID, 1)

    def forward(self, seq):  # seq: (batch, SEQ, IN)
        h = seq.new_zeros(seq.shape[0], HID)
        outs = []
        for t in range(seq.shape[1]):
            h = torch.tanh(seq[:, t] @ self.w_in + h @ self.w_rec + self.bias)
            outs.append(h)
        return self.readout(torch.stack(outs, dim=1)).squeeze(-1)


def make_data(n=512):
    x = torch.randn(n, SEQ, IN)
    running_mean = x[..., 0].cumsum(1) / torch.arange(1, SEQ + 1)
    return TensorDataset(x, running_mean)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tensors this small gain nothing from threads
    loader = DataLoader(make_data(), batch_size=2, shuffle=True)
    model = LoopRNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    it, step = iter(loader), 0
    while time.monotonic() < deadline:
        batch = next(it, None)
        if batch is None:
            it = iter(loader)
            continue
        x, target = batch
        loss = nn.functional.mse_loss(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
