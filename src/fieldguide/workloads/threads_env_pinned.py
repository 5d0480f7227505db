"""A small convolutional classifier whose script pins OpenMP to one thread before it imports torch
(`OMP_NUM_THREADS=1`, kept from the multi-rank launcher it was copied from), alone on a machine
with more cores: every convolution runs on one core while the others idle.
"""
import os

os.environ["OMP_NUM_THREADS"] = "1"  # "one thread per rank": there is one rank here

import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

FIELDGUIDE = {"playbook": "slow-training", "cause": "host.threads_limited", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(64 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = torch.randn(1024, 3, 32, 32), torch.randint(0, 10, (1024,))
    deadline = time.monotonic() + SECONDS
    step = 0
    while time.monotonic() < deadline:
        i = (step * 64) % (1024 - 64)
        loss = F.cross_entropy(model(images[i:i + 64]), labels[i:i + 64])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    main()
