"""A plain training loop driven by Hugging Face Accelerate (`Accelerator.prepare` on the
model, the optimizer and the loader; `accelerator.backward`), on CPU.

Problem: the dataset fetches each sample from a (simulated) feature store, 2 ms a
round trip, in the training process (num_workers=0): the loop waits for its batches.
Accelerate wraps the loader and the optimizer; input and steps must still be found.
"""
import os
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, BATCH = 48, 16


class FeatureStore(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(0.002)  # one lookup in the store: waiting, not CPU
        g = torch.Generator().manual_seed(i)
        x = torch.randn(FEATURES, generator=g)
        return x, x[:4].sum().unsqueeze(0)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    accelerator = Accelerator(cpu=True)
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(FeatureStore(), batch_size=BATCH, shuffle=True)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()
        if time.monotonic() > deadline:
            break


if __name__ == "__main__":
    main()
