"""A small routed-expert text classifier: token embeddings, a mixing layer, then
one of two expert MLPs picked per batch by a learned router (the router's mean
score decides which expert handles the batch), mean-pooled into a 4-way topic head.
The model is wrapped in `torch.compile`, with fixed batch and sequence sizes.

Problem: the routing decision reads the router's score back to Python with
`.item()` and branches on it inside `forward`, on every call. Dynamo cannot trace
a tensor-to-Python value, so every forward is split into separately compiled
pieces with eager Python in between (and so is the backward), instead of one
compiled graph.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": "compile.graph_breaks", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
VOCAB, SEQ, BATCH, WIDTH, TOPICS = 2000, 48, 32, 64, 4


def documents(n, gen):
    """Token sequences whose topic sets which band of the vocabulary is over-represented."""
    topics = torch.randint(TOPICS, (n,), generator=gen)
    band = VOCAB // TOPICS
    background = torch.randint(VOCAB, (n, SEQ), generator=gen)
    topical = topics.view(-1, 1) * band + torch.randint(band, (n, SEQ), generator=gen)
    use_topical = torch.rand(n, SEQ, generator=gen) < 0.35
    return torch.where(use_topical, topical, background), topics


class RoutedClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mix = nn.Sequential(nn.LayerNorm(WIDTH), nn.Linear(WIDTH, WIDTH), nn.GELU())
        self.router = nn.Linear(WIDTH, 1)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(), nn.Linear(2 * WIDTH, WIDTH))
            for _ in range(2))
        self.head = nn.Linear(WIDTH, TOPICS)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + self.mix(x)
        score = torch.sigmoid(self.router(x.mean(dim=1))).mean()
        expert = self.experts[0] if score.item() > 0.5 else self.experts[1]  # batch-level routing
        x = x + score * expert(x)
        return self.head(x.mean(dim=1))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    tokens, topics = documents(20_000, gen)
    model = torch.compile(RoutedClassifier())
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-2)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        idx = torch.randint(len(tokens), (BATCH,), generator=gen)
        loss = F.cross_entropy(model(tokens[idx]), topics[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        if time.monotonic() - last_print >= 2.0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
