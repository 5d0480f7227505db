"""An MLP classifier fed by a DataLoader (num_workers=0) over records in memory, until the
records move to slow storage: from FIELDGUIDE_CHANGE_AFTER_S on, each record is a blocking
read with a fixed latency (the page cache was evicted, the mount got slow), and the training
loop waits for its data on every step.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

try:  # run as a file (the helper is beside it) or as a module (-m fieldguide.workloads.changing.X)
    from _change import CHANGE_AFTER_S, mark_change
except ModuleNotFoundError:
    from fieldguide.workloads.changing._change import CHANGE_AFTER_S, mark_change
from torch import nn
from torch.utils.data import DataLoader, Dataset

WATCH = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "600"))
DIM, CLASSES, BATCH, N = 256, 10, 32, 1 << 14
READ_LATENCY_S = 0.0015  # per record, once slow: 48 ms a batch against ~10 ms of compute
changed = False


class Records(Dataset):
    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(N, DIM, generator=gen)
        self.y = torch.randint(0, CLASSES, (N,), generator=gen)

    def __len__(self):
        return N

    def __getitem__(self, i):
        if changed:
            time.sleep(READ_LATENCY_S)  # a blocking read from the slow mount
        return self.x[i], self.y[i]



def main():
    global changed
    torch.manual_seed(0)
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = nn.Sequential(nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Records(), batch_size=BATCH, shuffle=True, num_workers=0)
    started = time.monotonic()
    last_print, step = started, 0
    while True:
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            now = time.monotonic()
            if not changed and now - started >= CHANGE_AFTER_S:
                changed = True
                mark_change(step)
            if now - last_print >= 2:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = now
            if now - started >= SECONDS:
                return


if __name__ == "__main__":
    main()
