"""A byte-level tagger over synthetic records whose lengths vary widely from batch to batch
(no bucketing): each record's bytes are one-hot encoded (a B x L x 256 float tensor, tens of
MB, made and dropped every step) and pooled into 64-byte patches that a small MLP tags. The
job's resident memory swings with each batch's length.

Problem: "for a later look at the patches the model found hard", each step keeps a copy of
the first records' patch features in a list that is never emptied. Each kept tensor has that
batch's length, so no two steps keep the same shape: the leak is spread over many small
groups, under a resident set that swings by tens of MB from step to step while it grows by
tens of MB a minute.
"""
import os
import random
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TAGS, BATCH, PATCH, KEEP = 17, 16, 64, 1
SHORTEST, LONGEST = 2112, 4224  # record lengths in bytes, drawn every batch (multiples of PATCH)


class Records:
    """Batches of (bytes, patch tags): a patch's tag is a function of its most common byte (its first)."""

    def __init__(self, seed=0):
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)

    def __iter__(self):
        while True:
            length = self.rng.randint(SHORTEST // PATCH, LONGEST // PATCH) * PATCH
            data = torch.randint(256, (BATCH, length), generator=self.gen)
            patches = data.view(BATCH, -1, PATCH)
            patches[:, :, : PATCH // 2] = patches[:, :, :1]  # half of each patch repeats its first byte
            tags = patches[:, :, 0] % TAGS
            yield data, tags


def featurize(data):
    """Bag-of-bytes per patch: one-hot (B x L x 256), averaged over each patch of 64 bytes."""
    onehot = torch.zeros(*data.shape, 256).scatter_(2, data.unsqueeze(2), 1.0)
    return onehot.view(data.shape[0], -1, PATCH, 256).mean(2)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = nn.Sequential(nn.Linear(256, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, TAGS))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hard_patches = []  # never emptied

    deadline = time.monotonic() + SECONDS
    try:
        for step, (data, tags) in enumerate(Records(), start=1):
            feats = featurize(data)
            logits = model(feats)
            loss = F.cross_entropy(logits.reshape(-1, TAGS), tags.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            hard_patches.append(feats[:KEEP].detach().clone())  # kept "for a later look", every step
            if step % 20 == 0:
                print(f"step {step} len {data.shape[1]} loss {loss.item():.4f}", flush=True)
            if time.monotonic() >= deadline:
                return
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
