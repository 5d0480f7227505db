"""A small recurrent language model trained with gradient accumulation (4 micro-batches
per update). Each micro-step takes its next micro-batch right after its forward, from a
`next_micro_batch()` that tokenizes raw text with a word-piece splitter written in
Python, on the training thread (no DataLoader).

Problem: tokenizing a micro-batch costs more Python CPU than the model's own work, in
the middle of each micro-step: the loop is starved by batch production, not by waiting.
"""
import os
import random
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
ACCUMULATE, BATCH, LENGTH, VOCAB, WIDTH = 4, 8, 48, 512, 64


def make_pieces(rng):
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    return sorted({"".join(rng.choice(letters) for _ in range(rng.randint(1, 4))) for _ in range(VOCAB)},
                  key=len, reverse=True)[:VOCAB - 1]


def tokenize(text, pieces):
    """Greedy longest-match word pieces, one character at a time: plain Python work."""
    out, i = [], 0
    while i < len(text):
        for p, piece in enumerate(pieces):
            if text.startswith(piece, i):
                out.append(p + 1)
                i += len(piece)
                break
        else:
            out.append(0)
            i += 1
    return out


def next_micro_batch(rng, pieces):
    rows = []
    for _ in range(BATCH):
        text = "".join(rng.choice("etaoinshrdlu ") for _ in range(LENGTH * 3))
        ids = (tokenize(text, pieces) + [0] * (LENGTH + 1))[:LENGTH + 1]
        rows.append(ids)
    tokens = torch.tensor(rows)
    return tokens[:, :-1], tokens[:, 1:]


class RecurrentLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.rnn = nn.GRU(WIDTH, WIDTH, batch_first=True)
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        hidden, _ = self.rnn(self.embed(ids))
        return self.out(hidden)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    rng = random.Random(0)
    pieces = make_pieces(rng)
    model = RecurrentLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    x, y = next_micro_batch(rng, pieces)
    step = 0
    while time.monotonic() < deadline:
        for _ in range(ACCUMULATE):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)) / ACCUMULATE
            x, y = next_micro_batch(rng, pieces)  # prefetch the next micro-batch before backward
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item() * ACCUMULATE:.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
