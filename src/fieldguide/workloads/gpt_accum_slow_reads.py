"""A small GPT-style language model trained the way popular single-file trainers do it:
a memory-mapped token file read by `get_batch`, an evaluation of the loss before training
and every 200 iterations (forward passes under no_grad), gradient accumulation over 4
micro-steps with the next micro-batch fetched right after each forward, gradient clipping,
and a cosine learning-rate schedule set by hand on the optimizer.

Problem: the token file sits on slow network storage: each `get_batch` waits ~12 ms on a
read before it slices the windows. The loop waits for data most of each step, wherever in
the step it fetches, and the evaluations must not be taken for serving or for the steps.
"""
import math
import os
import signal
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BLOCK, BATCH, WIDTH, HEADS, LAYERS, VOCAB = 32, 8, 64, 4, 2, 256
ACCUMULATE, EVAL_EVERY, EVAL_ITERS = 4, 200, 40
READ_LATENCY_S = 0.012


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        self.register_buffer("mask", torch.triu(torch.ones(BLOCK, BLOCK, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask[: x.shape[1], : x.shape[1]], need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx, targets=None):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)
        loss = None if targets is None else F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


def get_batch(data, rng):
    time.sleep(READ_LATENCY_S)  # a read from network storage: waiting, not CPU
    ix = rng.integers(0, len(data) - BLOCK - 1, size=BATCH)
    x = torch.from_numpy(np.stack([data[i:i + BLOCK] for i in ix]).astype(np.int64))
    y = torch.from_numpy(np.stack([data[i + 1:i + 1 + BLOCK] for i in ix]).astype(np.int64))
    return x, y


@torch.no_grad()
def estimate_loss(model, data, rng):
    model.eval()
    losses = [model(*get_batch(data, rng))[1].item() for _ in range(EVAL_ITERS)]
    model.train()
    return sum(losses) / len(losses)


def lr_at(it, warmup=50, top=1e-3, floor=1e-4, decay=5000):
    if it < warmup:
        return top * (it + 1) / warmup
    ratio = min((it - warmup) / (decay - warmup), 1.0)
    return floor + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (top - floor)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-gpt-") as data_dir:
        path = os.path.join(data_dir, "train.bin")
        np.random.default_rng(0).integers(0, VOCAB, size=1 << 18, dtype=np.uint16).tofile(path)
        data = np.memmap(path, dtype=np.uint16, mode="r")
        rng = np.random.default_rng(1)
        model = GPT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        x, y = get_batch(data, rng)
        it = 0
        while time.monotonic() < deadline:
            if it % EVAL_EVERY == 0:
                print(f"iter {it}: val loss {estimate_loss(model, data, rng):.4f}", flush=True)
            for group in opt.param_groups:
                group["lr"] = lr_at(it)
            for _ in range(ACCUMULATE):
                _, loss = model(x, y)
                loss = loss / ACCUMULATE
                x, y = get_batch(data, rng)  # the next micro-batch while the device would compute
                loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            it += 1
            if time.monotonic() - last_print >= 1.5:
                print(f"step {it} loss {loss.item() * ACCUMULATE:.4f}", flush=True)
                last_print = time.monotonic()


if __name__ == "__main__":
    main()
