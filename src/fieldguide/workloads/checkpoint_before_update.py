"""A small MLP regressor whose loop saves a full checkpoint (model and optimizer
state) after the backward and before the update, every iteration, "so that a crash
in the update never loses the gradients' step".

Problem: a synchronous `torch.save` of model + Adam state on every step, in the
middle of the step: the training thread waits for the disk for a large share of
each step. The write is not between steps, where a loop's I/O is usually looked for.
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
FEATURES, HIDDEN, BATCH = 64, 768, 64


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    true_w = torch.randn(FEATURES, 1)
    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-ckpt-") as ckpt_dir:
        path = os.path.join(ckpt_dir, "last.pt")
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step = 0
        while time.monotonic() < deadline:
            x = torch.randn(BATCH, FEATURES)
            loss = F.mse_loss(model(x), x @ true_w)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with open(path, "wb") as f:  # before the update: the checkpoint holds this step's state
                torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            opt.step()
            step += 1
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = time.monotonic()


if __name__ == "__main__":
    main()
