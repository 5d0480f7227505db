"""A 4-layer MLP classifying synthetic Gaussian clusters, trained without torch.optim:
SGD with momentum and weight decay is written out by hand under torch.no_grad().

Healthy and compute-bound: the data lives in RAM and batches are sliced from it,
the update is one pass over eight parameter tensors, and the large matmuls of the
forward and backward pass dominate every step.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
DIM, CLASSES, BATCH, N = 384, 12, 512, 24576
LR, MOMENTUM, WEIGHT_DECAY = 0.05, 0.9, 1e-4


def make_data():
    centers = torch.randn(CLASSES, DIM) * 0.6
    labels = torch.randint(0, CLASSES, (N,))
    features = centers[labels] + torch.randn(N, DIM)
    return features, labels


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(DIM, 1024), nn.Linear(1024, 1024), nn.Linear(1024, 512)])
        self.out = nn.Linear(512, CLASSES)

    def forward(self, x):
        for layer in self.layers:
            x = F.silu(layer(x))
        return self.out(x)


class HandSGD:
    """SGD with momentum and L2 weight decay, no torch.optim involved."""

    def __init__(self, params):
        self.params = list(params)
        self.velocity = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def update(self):
        for p, v in zip(self.params, self.velocity, strict=True):
            g = p.grad.add(p, alpha=WEIGHT_DECAY)
            v.mul_(MOMENTUM).add_(g)
            p.sub_(v, alpha=LR)
            p.grad = None


def main():
    torch.manual_seed(0)
    features, labels = make_data()
    model = Classifier()
    sgd = HandSGD(model.parameters())

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = epoch = 0
    while True:
        order = torch.randperm(N)
        for start in range(0, N - BATCH + 1, BATCH):
            idx = order[start:start + BATCH]
            loss = F.cross_entropy(model(features[idx]), labels[idx])
            loss.backward()
            sgd.update()
            step += 1
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} epoch {epoch}", flush=True)
                last_print = now
            if now >= deadline:
                return
        epoch += 1


if __name__ == "__main__":
    main()
