"""A text classifier whose Dataset parses its whole annotation manifest in `__init__`, in the main
process, before the first batch: every record split, its fields converted, a salted dedup key hashed from its path.

Problem: the start. Building the index is ~17 s of pure Python (on a quiet 2-core box) before any step (and would in
every rank of a multi-rank job); once it runs, training is quick and steady.
"""
import hashlib
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-start", "cause": "start.data_setup", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
RECORDS = int(os.environ.get("FIELDGUIDE_INDEX_RECORDS", "2000000"))
VOCAB, DIM, CLASSES, BATCH = 4096, 64, 8, 64


def manifest_lines(n):
    """What a manifest file would hold: path, label, length, a checksum field per record."""
    for i in range(n):
        yield f"shard-{i % 977:04d}/sample-{i:08d}.txt\t{i % CLASSES}\t{16 + i % 48}\t{i * 2654435761 % 2**32:08x}"


class ManifestDataset(Dataset):
    def __init__(self, n):
        self.index = []
        for line in manifest_lines(n):  # the slow part: once per run, before any batch
            path, label, length, checksum = line.split("\t")
            key = hashlib.pbkdf2_hmac("sha1", path.encode(), b"manifest", 8)[:8]  # the dedup key, salted
            self.index.append((int.from_bytes(key, "little") % VOCAB, int(label), int(length), int(checksum, 16)))

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        token, label, length, _ = self.index[i]
        g = torch.Generator().manual_seed(i)
        tokens = (torch.randint(0, VOCAB, (length,), generator=g) + token) % VOCAB
        return F.pad(tokens, (0, 64 - length)), label


class BagOfWords(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, DIM)
        self.head = nn.Sequential(nn.Linear(DIM, 128), nn.ReLU(), nn.Linear(128, CLASSES))

    def forward(self, tokens):
        return self.head(self.embed(tokens))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    model = BagOfWords()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(ManifestDataset(RECORDS), batch_size=BATCH, shuffle=True)
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        for tokens, labels in loader:
            loss = F.cross_entropy(model(tokens), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = now
            if now >= deadline:
                return


if __name__ == "__main__":
    main()
