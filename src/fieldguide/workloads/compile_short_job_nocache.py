"""A short fine-tuning job: a small transformer encoder (standing in for a
pretrained backbone) gets a fresh 3-way classification head and is fine-tuned for
a fixed 150 steps on a synthetic intent dataset, compiled with `torch.compile`,
then exits.

Problem: inductor's caches were switched off in the script (left in from a
debugging session), so every launch compiles the forward and backward from
scratch. The whole job is only a few seconds of training, so the cold compile
takes several times longer than the training it was meant to speed up.
"""
import os
import signal
import sys
import time

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "compile-regression", "cause": "compile.cold_start", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
STEPS, BATCH, SEQ, VOCAB, WIDTH, INTENTS = 150, 16, 32, 1000, 64, 3

inductor_config.force_disable_caches = True  # TODO remove: was chasing a stale-kernel bug


def utterances(n, gen):
    """Token sequences; the intent is which of three trigger-token ranges appears most."""
    tokens = torch.randint(VOCAB, (n, SEQ), generator=gen)
    intents = torch.randint(INTENTS, (n,), generator=gen)
    triggers = intents.view(-1, 1) * 10 + torch.randint(10, (n, 6), generator=gen)
    tokens[:, :6] = triggers
    perm = torch.argsort(torch.rand(n, SEQ, generator=gen), dim=1)
    return torch.gather(tokens, 1, perm), intents


class IntentModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=4 * WIDTH, dropout=0.0, batch_first=True)
        self.backbone = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, INTENTS)  # the new, fine-tuned head

    def forward(self, tokens):
        return self.head(self.backbone(self.embed(tokens) + self.pos).mean(dim=1))


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    gen = torch.Generator().manual_seed(1)
    tokens, intents = utterances(4096, gen)
    model = torch.compile(IntentModel())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    deadline = time.monotonic() + SECONDS
    for step in range(1, STEPS + 1):
        idx = torch.randint(len(tokens), (BATCH,), generator=gen)
        loss = F.cross_entropy(model(tokens[idx]), intents[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == 1 or step % 25 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        if time.monotonic() >= deadline:
            break
    print("fine-tuning done", flush=True)


if __name__ == "__main__":
    main()
