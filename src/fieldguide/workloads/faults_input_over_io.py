"""A 1-D conv net forecasting sensor readings, with two problems of different sizes: the
bigger one is what to fix first.

- The larger: each sample's features (rolling mean, rolling deviation, first differences over
  a window of raw readings) are computed in pure Python inside `Dataset.__getitem__`, and the
  DataLoader has `num_workers=0`, so the training thread makes every batch itself.
- The smaller: after every step the run's metrics file (the last HISTORY steps' loss and
  per-layer gradient norms, as JSON, for a dashboard to poll) is rewritten and fsynced.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
making the batch is ~42% of the wall time, the metrics file ~13%, forward/backward/update the
rest (24 ms steps at load 3).
"""
import json
import math
import os
import random
import signal
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
WINDOW, SPAN, BATCH = 96, 16, 32  # readings per sample, rolling-statistics span, samples per batch
HISTORY = 40  # steps kept in the metrics file


class SensorWindows(Dataset):
    """Windows of one long synthetic sensor trace; features made per sample, in Python."""

    def __init__(self, n=200_000):
        rng = random.Random(0)
        level, self.trace = 0.0, []
        for i in range(n):
            level = 0.98 * level + rng.gauss(0, 0.3)
            self.trace.append(level + math.sin(i / 37.0))

    def __len__(self):
        return len(self.trace) - WINDOW - 1

    def __getitem__(self, i):
        raw = self.trace[i:i + WINDOW]
        feats = []
        for t in range(WINDOW):
            span = raw[max(0, t - SPAN + 1):t + 1]
            mean = sum(span) / len(span)
            dev = math.sqrt(sum((v - mean) ** 2 for v in span) / len(span))
            diff = raw[t] - raw[t - 1] if t else 0.0
            feats.append((raw[t], mean, dev, diff))
        x = torch.tensor(feats).T  # (4 channels, WINDOW)
        return x, torch.tensor(self.trace[i + WINDOW])


class MetricsFile:
    """The last HISTORY steps' metrics, rewritten as one JSON file after every step."""

    def __init__(self, path):
        self.path, self.history = path, []

    def write(self, step, loss, model):
        norms = {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}
        self.history = self.history[-(HISTORY - 1):] + [{"step": step, "time": time.time(), "loss": loss,
                                                         "grad_norms": norms}]
        with open(self.path + ".tmp", "w") as f:
            json.dump({"run": "sensor-forecast", "history": self.history}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(self.path + ".tmp", self.path)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    loader = DataLoader(SensorWindows(), batch_size=BATCH, shuffle=True, num_workers=0)
    model = nn.Sequential(
        nn.Conv1d(4, 32, 5, padding=2), nn.ReLU(),
        nn.Conv1d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(64, 64, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(4),
        nn.Flatten(), nn.Linear(64 * 4, 256), nn.ReLU(), nn.Linear(256, 1),
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-sensor-") as run_dir:
        log = MetricsFile(os.path.join(run_dir, "metrics.json"))
        spent = {"input": 0.0, "log": 0.0}
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step, t0, batches = 0, time.perf_counter(), iter(loader)
        while time.monotonic() < deadline:
            a = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(loader)
                continue
            b = time.perf_counter()
            loss = F.mse_loss(model(x).squeeze(-1), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            c = time.perf_counter()
            log.write(step, loss.item(), model)
            d = time.perf_counter()
            step += 1
            spent["input"] += b - a
            spent["log"] += d - c
            if step == 10:  # shares from step 10 on: past the first steps' warm-up
                t0, spent = time.perf_counter(), dict.fromkeys(spent, 0.0)
            if time.monotonic() - last_print >= 1.5:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
                if TIMING and step > 10:
                    wall = time.perf_counter() - t0
                    print("  " + " ".join(f"{k} {v / wall:.0%}" for k, v in spent.items())
                          + f" step {wall / (step - 10) * 1e3:.1f} ms", flush=True)
                last_print = time.monotonic()


if __name__ == "__main__":
    main()
