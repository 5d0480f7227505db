"""A 1-D conv net classifying synthetic vibration signals, with a "paranoid"
metrics logger that makes every record durable before the next step.

Problem: each step appends a JSON record and fsyncs it, then pickles all
weights and gradients to disk and fsyncs that too, blocking the loop on I/O.
"""
import json
import os
import pickle
import signal
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.blocking_io", "modes": ["launch"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
LENGTH, BATCH = 256, 32


def batches():
    t = torch.linspace(0, 1, LENGTH)
    while True:
        y = torch.randint(0, 5, (BATCH,))
        freq = (8 + 6 * y).float().view(-1, 1)
        x = torch.sin(2 * torch.pi * freq * t) + 0.8 * torch.randn(BATCH, LENGTH)
        yield x.unsqueeze(1), y


class MetricsLogger:
    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.log = open(os.path.join(run_dir, "metrics.jsonl"), "a")

    def record(self, step, loss, model):
        grads = {n: p.grad.detach() for n, p in model.named_parameters()}
        rec = {"step": step, "loss": loss, "time": time.time(),
               "grad_norms": {n: g.norm().item() for n, g in grads.items()}}
        self.log.write(json.dumps(rec) + "\n")
        self.log.flush()
        os.fsync(self.log.fileno())
        weights = {n: p.detach() for n, p in model.named_parameters()}
        with open(os.path.join(self.run_dir, "debug_last_step.pkl"), "wb") as f:
            pickle.dump({"step": step, "grads": grads, "weights": weights}, f,
                        protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    model = nn.Sequential(
        nn.Conv1d(1, 32, 9, padding=4), nn.ReLU(), nn.MaxPool1d(4),
        nn.Conv1d(32, 64, 9, padding=4), nn.ReLU(), nn.MaxPool1d(4),
        nn.Conv1d(64, 64, 5, padding=2), nn.ReLU(), nn.AdaptiveMaxPool1d(8),
        nn.Flatten(), nn.Linear(64 * 8, 2048), nn.ReLU(), nn.Linear(2048, 5),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-run-") as run_dir:
        logger = MetricsLogger(run_dir)
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        for step, (x, y) in enumerate(batches()):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            logger.record(step, loss.item(), model)
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                last_print = time.monotonic()
            if time.monotonic() >= deadline:
                break
        logger.log.close()


if __name__ == "__main__":
    main()
