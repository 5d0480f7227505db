"""An EmbeddingBag click-through model streaming variable-length feature bags
from a (simulated) feed service through an IterableDataset with 2 workers.

Problem: each record waits ~9 ms for the feed to answer; two workers are not
nearly enough to hide that latency, so the loop mostly waits for batches.
"""
import os
import random
import select
import socket
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
VOCAB, FEED_LATENCY_S = 20_000, 0.009


class ClickFeed(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        wid = info.id if info is not None else 0
        rng = random.Random(1234 + wid)
        feed, _peer = socket.socketpair()  # the feed's connection; answers come late
        while True:
            select.select([feed], [], [], FEED_LATENCY_S)  # wait for the next record
            ids = [rng.randrange(VOCAB) for _ in range(rng.randint(5, 40))]
            clicked = float(sum(1 for t in ids if t < VOCAB // 20) >= 2)
            yield torch.tensor(ids), clicked


def collate_bags(records):
    ids = [r[0] for r in records]
    offsets = torch.tensor([0] + [len(t) for t in ids[:-1]]).cumsum(0)
    return torch.cat(ids), offsets, torch.tensor([r[1] for r in records])


class ClickModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, 32, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids, offsets):
        return self.mlp(self.bag(ids, offsets)).squeeze(1)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # keep the trainer to one core; the workers get the rest
    loader = DataLoader(ClickFeed(), batch_size=16, num_workers=2, collate_fn=collate_bags)
    model = ClickModel()
    opt = torch.optim.Adagrad(model.parameters(), lr=0.05)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for ids, offsets, clicked in loader:
        loss = F.binary_cross_entropy_with_logits(model(ids, offsets), clicked)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = now
        if now >= deadline:
            break


if __name__ == "__main__":
    main()
