"""A small fully convolutional segmenter for synthetic 128x128 "cell microscopy"
images, run on a CPU node slot with a memory cap, as a batch scheduler gives one.

The job checks itself with a few smoke steps at batch 2, then caps its own
address space the way `ulimit -v` on the node would (RLIMIT_AS: what it maps now
plus 600 MB of headroom, a small slot), then trains at the real batch size.

Problem: at batch 64 and full resolution, the activations saved for backward
(several 64x32x128x128 feature maps, 128 MB each) are far more than the headroom:
the first full-size step dies in its forward pass with the CPU allocator's
"can't allocate memory" RuntimeError. Parameters and optimizer state are tiny.
"""
import os
import resource
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.activations", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SIZE, SMOKE_BATCH, BATCH, SMOKE_STEPS = 128, 2, 64, 4
HEADROOM = 600 << 20  # bytes of address space above what the job maps after the smoke steps


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(block(1, 32), block(32, 32))
        self.down = nn.Sequential(nn.MaxPool2d(2), block(32, 64), block(64, 64))
        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.fuse = block(96, 32)
        self.out = nn.Conv2d(32, 1, 1)

    def forward(self, x):
        skip = self.stem(x)
        return self.out(self.fuse(torch.cat([skip, self.up(self.down(skip))], dim=1)))


def cells(n, gen):
    """Images of blurry round cells in noise, and their masks."""
    yy, xx = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    centres = torch.rand(n, 6, 2, generator=gen) * SIZE
    radii = 6 + 10 * torch.rand(n, 6, 1, 1, generator=gen)
    dist = ((xx - centres[..., 0, None, None]) ** 2 + (yy - centres[..., 1, None, None]) ** 2).sqrt()
    mask = (dist < radii).any(dim=1, keepdim=True).float()
    image = F.avg_pool2d(mask, 5, stride=1, padding=2) + 0.3 * torch.randn(n, 1, SIZE, SIZE, generator=gen)
    return image, mask


def vm_size():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    model = Segmenter()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    step = 0
    while time.monotonic() < deadline:
        batch = SMOKE_BATCH if step < SMOKE_STEPS else BATCH
        if step == SMOKE_STEPS:
            cap = vm_size() + HEADROOM
            resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
            print(f"smoke steps done; address space capped at {cap >> 20} MB, batch {BATCH}", flush=True)
        image, mask = cells(batch, gen)
        loss = F.binary_cross_entropy_with_logits(model(image), mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        print(f"step {step} batch {batch} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
