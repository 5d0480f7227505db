"""A steady CPU training loop that reports its own throughput: one JSON line every half second.

Used by overhead.py: an MLP step of ~5-10 ms with a DataLoader over in-memory tensors.
"""

import json
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)
seconds = float(os.environ.get("BENCH_SECONDS", "60"))
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))
loader = DataLoader(TensorDataset(x, y), batch_size=128, shuffle=True)
width = int(os.environ.get("BENCH_WIDTH", "1024"))  # 1024: ~10-16 ms steps on the 2-core box; 256: ~3 ms
model = nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = last = time.monotonic()
steps = 0
while time.monotonic() - start < seconds:
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        now = time.monotonic()
        if now - last >= 0.5:
            print(json.dumps({"t": now, "steps": steps}), flush=True)
            last = now
        if now - start >= seconds:
            break
sys.exit(0)
