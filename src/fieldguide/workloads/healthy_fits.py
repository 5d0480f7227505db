"""A churn classifier over synthetic customer records: embeddings for the
categorical columns (plan, region, device) next to the numeric ones, an MLP on
top, trained with a DataLoader over an in-memory table.

Healthy for memory: the table is loaded once, every step's tensors are freed by
the next, and the progress line keeps numbers (`loss.item()` in a bounded deque),
not tensors. Memory is flat step over step and far below any limit.
"""
import collections
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": None, "conclusion": "memory.fits", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
CARDINALITY = {"plan": 12, "region": 40, "device": 7}
NUMERIC, BATCH = 20, 128


def customers(n, gen):
    cats = torch.stack([torch.randint(c, (n,), generator=gen) for c in CARDINALITY.values()], dim=1)
    nums = torch.randn(n, NUMERIC, generator=gen)
    score = nums[:, :4].sum(1) * 0.5 + (cats[:, 0] % 3 == 0).float() - (cats[:, 2] == 1).float()
    churned = (score + 0.5 * torch.randn(n, generator=gen) > 0.8).float()
    return TensorDataset(cats, nums, churned)


class ChurnModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeds = nn.ModuleList(nn.Embedding(c, 8) for c in CARDINALITY.values())
        width = 8 * len(CARDINALITY) + NUMERIC
        self.mlp = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 1))

    def forward(self, cats, nums):
        cols = [emb(cats[:, i]) for i, emb in enumerate(self.embeds)]
        return self.mlp(torch.cat([*cols, nums], dim=1)).squeeze(1)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    loader = DataLoader(customers(100_000, torch.Generator().manual_seed(1)), batch_size=BATCH, shuffle=True)
    model = ChurnModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    pos_weight = torch.tensor(2.0)
    recent = collections.deque(maxlen=100)

    deadline = time.monotonic() + SECONDS
    step = 0
    try:
        for epoch in range(1000):
            for cats, nums, churned in loader:
                loss = F.binary_cross_entropy_with_logits(model(cats, nums), churned, pos_weight=pos_weight)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                recent.append(loss.item())
                step += 1
                if step % 100 == 0:
                    print(f"step {step} epoch {epoch} loss {sum(recent) / len(recent):.4f}", flush=True)
                if time.monotonic() >= deadline:
                    return
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
