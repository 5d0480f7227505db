"""A small transformer language model whose `get_batch()` tokenizes raw text on the
fly, in pure Python, on the training thread (no DataLoader).

The corpus (synthetic "log line" text) is written once to a temporary directory at
start and memory-mapped as raw bytes. A byte-pair merge table is learned from its
first few kilobytes; each batch takes random raw windows and applies the merges
one pass at a time with Python loops.

Problem: building each batch costs tens of ms of Python CPU work on the training
thread, as much as the model's own step: the loop is starved by batch production.
"""
import math
import os
import random
import signal
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BLOCK, BATCH, WIDTH, HEADS, LAYERS = 64, 16, 128, 4, 2
MERGES = 128  # learned byte-pair merges: the vocabulary is 256 bytes + MERGES
RAW = 3 * BLOCK  # raw bytes per window, enough for BLOCK + 1 tokens after merging


def write_corpus(path, n_bytes=1 << 20):
    """Synthetic text: log-like lines built from a small made-up vocabulary."""
    rng = random.Random(0)
    words = ["".join(rng.choice("etaoinshrdlucmfwyp") for _ in range(rng.randint(2, 8))) for _ in range(400)]
    levels = ["INFO", "WARN", "DEBUG", "ERROR"]
    out, size = [], 0
    while size < n_bytes:
        line = f"{rng.randint(0, 86399):05d} {rng.choice(levels)} " + " ".join(
            rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n"
        out.append(line)
        size += len(line)
    with open(path, "wb") as f:
        f.write("".join(out).encode("ascii")[:n_bytes])
    return n_bytes


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab=256):
        super().__init__()
        self.tok = nn.Embedding(vocab, WIDTH)
        self.pos = nn.Parameter(torch.zeros(BLOCK, WIDTH))
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        return self.head(self.norm(self.blocks(x)))


def learn_merges(sample):
    """The MERGES most frequent adjacent byte pairs of a sample, each given a new token id."""
    counts = {}
    for a, b in zip(sample, sample[1:], strict=False):
        counts[(a, b)] = counts.get((a, b), 0) + 1
    ranked = sorted(counts, key=lambda pair: -counts[pair])[:MERGES]
    return [(pair, 256 + i) for i, pair in enumerate(ranked)]


def tokenize(raw, merges):
    """Apply each merge in rank order, one pass over the ids per merge."""
    ids = list(raw)
    for (a, b), new in merges:
        out, i, n = [], 0, len(ids)
        while i < n:
            if i + 1 < n and ids[i] == a and ids[i + 1] == b:
                out.append(new)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids = out
    return ids


def get_batch(raw_bytes, merges, rng):
    """BATCH random windows of the raw file, tokenized now; inputs and next-token targets."""
    rows = []
    for _ in range(BATCH):
        start = rng.randrange(len(raw_bytes) - RAW)
        ids = tokenize(raw_bytes[start:start + RAW].tolist(), merges)
        ids = (ids + [0] * (BLOCK + 1))[:BLOCK + 1]
        rows.append(ids)
    windows = torch.tensor(rows, dtype=torch.long)
    return windows[:, :-1], windows[:, 1:]


def main():
    torch.manual_seed(0)
    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-corpus-") as data_dir:
        path = os.path.join(data_dir, "train.bin")
        n = write_corpus(path)
        raw_bytes = torch.from_file(path, shared=True, size=n, dtype=torch.uint8)  # memory-mapped
        merges = learn_merges(raw_bytes[:65536].tolist())
        rng = random.Random(1)
        model = TinyLM(vocab=256 + MERGES)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step = 0
        while True:
            x, y = get_batch(raw_bytes, merges, rng)
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} ppl {math.exp(min(loss.item(), 20)):.1f}", flush=True)
                last_print = now
            if now >= deadline:
                break


if __name__ == "__main__":
    main()
