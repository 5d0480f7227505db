"""A product-review sentiment classifier: an EmbeddingBag over hashed word and
word-bigram ids (mean-pooled per review), a small MLP and a 3-way head
(negative / neutral / positive), trained with Adam on synthetic reviews of
varying length, in plain eager PyTorch.

Healthy: an ordinary eager training job, sized sensibly for its data, with no
input, memory or host-overhead trouble. It never calls `torch.compile`, so there
is no compiled code in it to judge.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": None, "verdict": "inconclusive", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BUCKETS, DIM, BATCH, CLASSES = 50_000, 64, 64, 3


def reviews(n, gen):
    """Flat hashed-id lists with offsets: each class over-uses its own block of ids."""
    lengths = torch.randint(8, 80, (n,), generator=gen)
    labels = torch.randint(CLASSES, (n,), generator=gen)
    ids, offsets = [], []
    total = 0
    for length, label in zip(lengths.tolist(), labels.tolist(), strict=True):
        common = torch.randint(BUCKETS, (length,), generator=gen)
        cues = label * 1000 + torch.randint(1000, (length,), generator=gen)
        ids.append(torch.where(torch.rand(length, generator=gen) < 0.2, cues, common))
        offsets.append(total)
        total += length
    return torch.cat(ids), torch.tensor(offsets), lengths, labels


class SentimentModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(BUCKETS, DIM, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, CLASSES))

    def forward(self, ids, offsets):
        return self.mlp(self.bag(ids, offsets))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    ids, offsets, lengths, labels = reviews(20_000, gen)
    model = SentimentModel()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        pick = torch.randint(len(labels), (BATCH,), generator=gen)
        batch_ids = torch.cat([ids[offsets[i]:offsets[i] + lengths[i]] for i in pick.tolist()])
        batch_offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths[pick].cumsum(0)[:-1]])
        loss = F.cross_entropy(model(batch_ids, batch_offsets), labels[pick])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
