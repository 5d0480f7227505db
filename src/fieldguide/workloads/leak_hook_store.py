"""A tabular autoencoder compressing synthetic sensor readings (64 correlated
channels) to an 8-d code, trained with a hand-rolled batch loop over an
in-memory tensor, with a forward hook on the bottleneck "to plot the latent
space after training".

Problem: the hook appends the bottleneck's output to a list on every forward,
as it is: attached to its autograd graph, and never cleared or removed. Every
step leaves one more code tensor, and the graph behind it, alive.
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
CHANNELS, CODE, BATCH = 64, 8, 1024


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(CHANNELS, 256), nn.ELU(), nn.Linear(256, 128), nn.ELU())
        self.bottleneck = nn.Linear(128, CODE)
        self.decoder = nn.Sequential(nn.Linear(CODE, 128), nn.ELU(), nn.Linear(128, 256), nn.ELU(),
                                     nn.Linear(256, CHANNELS))

    def forward(self, x):
        return self.decoder(self.bottleneck(self.encoder(x)))


def sensor_table(n=65_536):
    """Readings driven by a few latent factors, mixed and squashed, plus sensor noise."""
    g = torch.Generator().manual_seed(0)
    factors = torch.randn(n, 5, generator=g)
    mixing = torch.randn(5, CHANNELS, generator=g)
    return torch.tanh(factors @ mixing / 2) + 0.05 * torch.randn(n, CHANNELS, generator=g)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    readings = sensor_table()
    model = AutoEncoder()
    codes = []  # for the latent-space plot after training
    model.bottleneck.register_forward_hook(lambda module, inputs, output: codes.append(output))
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    deadline = time.monotonic() + SECONDS
    step = 0
    try:
        while time.monotonic() < deadline:
            order = torch.randperm(len(readings))
            for start in range(0, len(order) - BATCH + 1, BATCH):
                x = readings[order[start:start + BATCH]]
                noisy = x + 0.1 * torch.randn_like(x)  # denoising objective
                loss = F.mse_loss(model(noisy), x)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step % 100 == 0:
                    print(f"step {step} loss {loss.item():.5f} codes kept {len(codes)}", flush=True)
                if time.monotonic() >= deadline:
                    break
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
