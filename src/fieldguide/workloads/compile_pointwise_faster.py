"""A gated residual feature refiner for audio-frame embeddings: 24-dim frame
features are lifted to 128 channels, refined by six gated residual blocks
(LayerNorm, a learned affine, a hard-swish gate, a learned quadratic modulation,
softsign squashing, a scaled residual add), mean-pooled over 64 frames and
classified into 8 sound events. The model is wrapped in `torch.compile`, with
fixed shapes.

Healthy for compilation: almost all of the work is chains of elementwise ops
over a 32 x 64 x 128 activation, which eager runs as one memory pass per op (and
as many again in the backward) and inductor fuses into a few kernels; there are no graph breaks and no shape
changes, so it compiles once and every step after that is clearly faster than
eager.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": None, "conclusion": "compile.faster", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BATCH, FRAMES, FEATURES, WIDTH, EVENTS, DEPTH = 32, 64, 24, 128, 8, 6


class GatedResidual(nn.Module):
    """LayerNorm, learned affine, hard-swish gate, quadratic modulation, softsign, scaled residual."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.scale = nn.Parameter(torch.tensor(1.0))
        self.shift = nn.Parameter(torch.tensor(0.0))
        self.curve = nn.Parameter(torch.tensor(0.5))
        self.alpha = nn.Parameter(torch.tensor(0.1))

    def forward(self, x):
        y = self.norm(x)
        a = y * self.scale + self.shift
        h = a * (a + 3.0).clamp(0.0, 6.0) / 6.0
        h = h * (1.0 + self.curve * y * y) - 0.1 * y
        h = h / (h.abs() + 1.0)
        return x + self.alpha * h


class FrameRefiner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lift = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.Sequential(*[GatedResidual() for _ in range(DEPTH)])
        self.head = nn.Linear(WIDTH, EVENTS)

    def forward(self, frames):
        return self.head(self.blocks(self.lift(frames)).mean(dim=1))


def clips(n, gen):
    """Frame features whose event sets a characteristic spectral profile, plus noise."""
    events = torch.randint(EVENTS, (n,), generator=gen)
    profiles = torch.randn(EVENTS, FEATURES, generator=gen)
    envelope = torch.sin(torch.linspace(0, 3.14, FRAMES)).view(1, FRAMES, 1)
    frames = profiles[events].unsqueeze(1) * envelope + torch.randn(n, FRAMES, FEATURES, generator=gen)
    return frames, events


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    frames, events = clips(4096, gen)
    model = torch.compile(FrameRefiner())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        idx = torch.randint(len(frames), (BATCH,), generator=gen)
        loss = F.cross_entropy(model(frames[idx]), events[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
