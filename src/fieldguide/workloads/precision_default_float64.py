"""A regression MLP whose script sets torch's default dtype to float64 at the top (copied from a
notebook that needed it for a solver): every parameter and every batch made after it is float64,
and each matmul runs at about half the float32 rate.
"""
import os
import time

import torch
from torch import nn

torch.set_default_dtype(torch.float64)

FIELDGUIDE = {"playbook": "slow-training", "cause": "device.precision", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))


def main():
    torch.manual_seed(0)
    features = torch.randn(8192, 384)
    targets = torch.sin(features[:, :8])
    model = nn.Sequential(nn.Linear(384, 768), nn.Tanh(), nn.Linear(768, 768), nn.Tanh(), nn.Linear(768, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    deadline = time.monotonic() + SECONDS
    step = 0
    while time.monotonic() < deadline:
        i = (step * 128) % (8192 - 128)
        loss = nn.functional.mse_loss(model(features[i:i + 128]), targets[i:i + 128])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
