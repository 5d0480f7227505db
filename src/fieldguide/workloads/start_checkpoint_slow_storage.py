"""A convnet that resumes from a checkpoint on slow shared storage before it trains.

Problem: the start. The checkpoint (model and Adam state, ~19 MB) is read through a file object
that delivers ~2 MB/s, as a busy network filesystem does, so `torch.load` takes ~10 s before
the first step; the training itself is quick and steady.
"""
import io
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-start", "cause": "start.checkpoint_load", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
BYTES_PER_SECOND = float(os.environ.get("FIELDGUIDE_STORAGE_BYTES_PER_S", str(2 * 2**20)))
BATCH = 32


class SlowStorage(io.RawIOBase):
    """A file on a slow network filesystem: every read costs its bytes at the storage's speed."""

    def __init__(self, data):
        self.buffer = io.BytesIO(data)

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        return self.buffer.seek(offset, whence)

    def tell(self):
        return self.buffer.tell()

    def readinto(self, b):
        n = self.buffer.readinto(b)
        time.sleep(n / BYTES_PER_SECOND)
        return n


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4))
        self.wide = nn.Linear(512, 3000)  # most of the checkpoint's bytes
        self.head = nn.Linear(3000, 10)

    def forward(self, x):
        return self.head(F.relu(self.wide(self.conv(x).flatten(1))))


def saved_checkpoint(model, optimizer):
    """Stands in for yesterday's run: its checkpoint, as bytes on the shared filesystem."""
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    optimizer.step()  # so that the Adam state exists
    optimizer.zero_grad(set_to_none=True)
    blob = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1000}, blob)
    return blob.getvalue()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    blob = saved_checkpoint(model, optimizer)
    state = torch.load(SlowStorage(blob), map_location="cpu", weights_only=True)  # the slow part
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    x, y = torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = state["step"]
    while time.monotonic() < deadline:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
            last_print = now


if __name__ == "__main__":
    main()
