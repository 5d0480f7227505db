"""A small conv net classifying synthetic 24x24 colour "texture" patches into 200
classes, fed by a DataLoader, with top-1/top-5 accuracy computed at the end of
each epoch.

Problem: to compute the epoch's accuracy, every batch's logits are appended to a
list as they come out of the model, still attached to their autograd graph (no
`.detach()`), and the list is only emptied when the epoch ends. An epoch here is
far longer than the run, so the list (and the memory it holds) grows step after
step.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
CLASSES, SIZE, BATCH = 200, 24, 64


class Textures(Dataset):
    """Patches made on the fly: a class-specific oriented stripe pattern plus noise."""

    def __init__(self, n=400_000):
        self.n = n
        g = torch.Generator().manual_seed(0)
        self.freq = 0.3 + torch.rand(CLASSES, generator=g)
        self.angle = torch.rand(CLASSES, generator=g) * 3.1416
        self.tint = torch.rand(CLASSES, 3, generator=g)
        coords = torch.arange(SIZE, dtype=torch.float32)
        self.yy, self.xx = torch.meshgrid(coords, coords, indexing="ij")

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        label = i * 7919 % CLASSES
        g = torch.Generator().manual_seed(i)
        a = self.angle[label]
        wave = torch.sin(self.freq[label] * (self.xx * torch.cos(a) + self.yy * torch.sin(a)))
        img = self.tint[label].view(3, 1, 1) * wave + 0.4 * torch.randn(3, SIZE, SIZE, generator=g)
        return img, label


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    loader = DataLoader(Textures(), batch_size=BATCH, shuffle=True, num_workers=0, drop_last=True)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 6 * 6, 256), nn.ReLU(), nn.Linear(256, CLASSES),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, nesterov=True)

    deadline = time.monotonic() + SECONDS
    step = 0
    try:
        for epoch in range(1000):
            all_logits, all_labels = [], []
            for x, y in loader:
                logits = model(x)
                loss = F.cross_entropy(logits, y, label_smoothing=0.1)
                opt.zero_grad()
                loss.backward()
                opt.step()
                all_logits.append(logits)  # kept "for the epoch's metrics", graph and all
                all_labels.append(y)
                step += 1
                if step % 100 == 0:
                    print(f"step {step} epoch {epoch} loss {loss.item():.4f}", flush=True)
                if time.monotonic() >= deadline:
                    return
            logits, labels = torch.cat(all_logits), torch.cat(all_labels)
            top5 = logits.topk(5, dim=1).indices
            print(f"epoch {epoch} top1 {(top5[:, 0] == labels).float().mean():.3f} "
                  f"top5 {(top5 == labels[:, None]).any(1).float().mean():.3f}", flush=True)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
