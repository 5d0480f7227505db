"""A small conv net classifying 32x32 colour images that live in memory.

Healthy: the images sit in a TensorDataset and each batch is gathered with one
indexing call (a BatchSampler feeds whole index lists), so convolutions dominate.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))


def make_images(n):
    labels = torch.randint(0, 10, (n,))
    images = torch.randn(n, 3, 32, 32) * 0.5
    # A faint class-dependent stripe so there is something to learn.
    images[torch.arange(n), labels % 3] += labels.float().view(-1, 1, 1) / 10
    return images, labels


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 96, 3, padding=1), nn.ReLU(),
        )
        self.head = nn.Linear(96, 10)

    def forward(self, x):
        x = self.features(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


def main():
    torch.manual_seed(0)
    images, labels = make_images(4096)
    dataset = TensorDataset(images, labels)
    batches = BatchSampler(RandomSampler(dataset), batch_size=48, drop_last=True)
    loader = DataLoader(dataset, sampler=batches, batch_size=None, num_workers=0)

    model = SmallConvNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    for epoch in range(10_000):
        for i, (x, y) in enumerate(loader):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            now = time.monotonic()
            if now - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f} epoch {epoch} batch {i}", flush=True)
                last_print = now
            if now >= deadline:
                return


if __name__ == "__main__":
    main()
