"""A small next-token language model (embedding -> MLP -> 8k-way softmax, ~12 MB
of weights) that writes a full checkpoint after every optimizer step.

Problem: a synchronous `torch.save(model.state_dict())` + `os.fsync` on every
step blocks the training loop on disk I/O for a large share of each step.
"""
import os
import signal
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.blocking_io", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
VOCAB, CONTEXT, DIM, BATCH = 8000, 8, 128, 32


class ContextLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Sequential(nn.Linear(CONTEXT * DIM, 256), nn.ReLU())
        self.out = nn.Linear(256, VOCAB)

    def forward(self, ctx):
        return self.out(self.mix(self.embed(ctx).flatten(1)))


def token_stream(n=200_000):
    # A cheap "corpus": a random walk over the vocabulary, so the next token is learnable.
    steps = torch.randint(-3, 4, (n,))
    return steps.cumsum(0).remainder(VOCAB)


def save_checkpoint(model, step, ckpt_dir):
    tmp = os.path.join(ckpt_dir, "latest.pt.tmp")
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(ckpt_dir, "latest.pt"))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    corpus = token_stream()
    model = ContextLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-ckpt-") as ckpt_dir:
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step = 0
        while time.monotonic() < deadline:
            starts = torch.randint(0, len(corpus) - CONTEXT - 1, (BATCH,))
            window = corpus[starts.view(-1, 1) + torch.arange(CONTEXT + 1)]
            loss = F.cross_entropy(model(window[:, :-1]), window[:, -1])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            save_checkpoint(model, step, ckpt_dir)  # "never lose progress"
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = time.monotonic()


if __name__ == "__main__":
    main()
