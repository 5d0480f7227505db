"""A small character-level transformer language model trained on a token file,
with its own `get_batch()` and no DataLoader.

The corpus (synthetic "log line" text) is written once to a temporary directory at
start, then memory-mapped as a uint8 token array. Each batch is a set of random
windows of it, as a trainer reading from a network filesystem would do.

Problem: `get_batch()` waits ~25 ms per batch on (simulated) remote storage
latency, on the training thread: the loop waits for its data on every step.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BLOCK, BATCH, WIDTH, HEADS, LAYERS = 64, 16, 128, 4, 2
STORAGE_LATENCY_S = 0.025  # one round trip to the (simulated) network filesystem per batch


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


def get_batch(tokens, gen):
    """BATCH random windows of the token file; inputs and next-token targets."""
    time.sleep(STORAGE_LATENCY_S)  # ranged reads from remote storage: latency, not CPU
    starts = torch.randint(len(tokens) - BLOCK - 1, (BATCH, 1), generator=gen)
    windows = tokens[starts + torch.arange(BLOCK + 1)].long()
    return windows[:, :-1], windows[:, 1:]


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-tokens-") as data_dir:
        path = os.path.join(data_dir, "train.bin")
        n = write_corpus(path)
        tokens = torch.from_file(path, shared=True, size=n, dtype=torch.uint8)  # memory-mapped
        gen = torch.Generator().manual_seed(1)
        model = TinyLM()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step = 0
        while True:
            x, y = get_batch(tokens, gen)
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
