"""An LSTM classifying short sensor sequences over many small epochs (24 steps each), with
2 DataLoader workers that are torn down and re-spawned every epoch.

Problem: `persistent_workers=False` plus a slow `worker_init_fn` (~0.8 s to
"open the feature index") stalls the start of every short epoch.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.worker_startup", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SEQ, FEATS = 64, 12


def open_feature_index(worker_id):
    # Stands in for mapping a large on-disk index / connecting to a database.
    time.sleep(0.8)
    torch.manual_seed(1000 + worker_id)


class SensorWindows(Dataset):
    def __init__(self, n=768):
        g = torch.Generator().manual_seed(0)
        self.labels = torch.randint(0, 3, (n,), generator=g)
        trend = (self.labels.float() - 1).view(-1, 1, 1) * torch.linspace(0, 1, SEQ).view(1, -1, 1)
        self.windows = trend + 0.3 * torch.randn(n, SEQ, FEATS, generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.windows[i], self.labels[i]


class SensorLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATS, 160, batch_first=True)
        self.head = nn.Linear(160, 3)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.head(h[-1])


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one intra-op thread; the loader workers get the other core
    loader = DataLoader(SensorWindows(), batch_size=32, shuffle=True, num_workers=2,
                        persistent_workers=False, worker_init_fn=open_feature_index)
    model = SensorLSTM()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for epoch in range(1_000_000):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} epoch {epoch}", flush=True)
                last_print = time.monotonic()
            if time.monotonic() >= deadline:
                return


if __name__ == "__main__":
    main()
