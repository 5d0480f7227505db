"""A tiny transformer encoder classifying token sequences, still wrapped in the
autograd profiler from a debugging session.

Problem: `torch.autograd.profiler.profile(enabled=True)` is left on around the
training loop (re-entered every 50 steps), so every op is recorded.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.debug_mode", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
VOCAB, SEQ, DIM = 1000, 32, 64
STEPS_PER_TRACE = 50  # "profile a few dozen steps, then look at the table"


class TinyEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        layer = nn.TransformerEncoderLayer(DIM, nhead=4, dim_feedforward=128,
                                           dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(DIM, 4)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens) + self.pos)
        return self.head(h.mean(dim=1))


def sample_batch(batch=16):
    tokens = torch.randint(0, VOCAB, (batch, SEQ))
    labels = tokens[:, 0] % 4  # decided by the first token
    return tokens, labels


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # small model, single-threaded kernels
    model = TinyEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while time.monotonic() < deadline:
        # TODO(debug): remove once the slow-step investigation is over.
        with torch.autograd.profiler.profile(enabled=True) as prof:
            for _ in range(STEPS_PER_TRACE):
                tokens, labels = sample_batch()
                loss = F.cross_entropy(model(tokens), labels)
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
        del prof  # the trace was never looked at


if __name__ == "__main__":
    main()
