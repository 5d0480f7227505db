"""A click-through model (hashed categorical features -> EmbeddingBag -> MLP) with two
problems of different sizes: the bigger one is what to fix first.

- The larger: after every step the run pickles the model's and the optimizer's state to a
  file (`pickle.dump` + `fsync`, "so nothing is lost") and appends a JSON line of metrics.
- The smaller: `get_batch()` builds each batch on the training thread, hashing every
  record's categorical fields into buckets in pure Python (no DataLoader, no workers).

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
the save is 48-50% of the wall time, making the batch 15-18%, forward/backward/update the rest
(32 ms steps on a quiet box, 57 ms beside other jobs at load 3).
"""
import json
import os
import pickle
import random
import signal
import sys
import tempfile
import time
import zlib

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.blocking_io", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
BUCKETS, DIM, FIELDS, BATCH = 10_000, 32, 20, 256


def get_batch(rng):
    """BATCH synthetic records, each field hashed to a bucket in Python (the "feature pipeline")."""
    ids, labels = [], []
    for _ in range(BATCH):
        record = [f"f{k}={rng.randrange(50 + 40 * k)}" for k in range(FIELDS)]
        ids.append([zlib.crc32(value.encode()) % BUCKETS for value in record])
        labels.append(float(sum(int(v.rsplit("=", 1)[1]) % 7 == 0 for v in record[:6]) >= 2))
    return torch.tensor(ids), torch.tensor(labels)


class ClickModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(BUCKETS, DIM, mode="sum")
        self.mlp = nn.Sequential(nn.Linear(DIM, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))

    def forward(self, ids):
        return self.mlp(self.embed(ids)).squeeze(-1)


def save_state(run_dir, step, model, opt, loss):
    """The whole training state pickled and fsynced, then a metrics line appended."""
    tmp = os.path.join(run_dir, "state.pkl.tmp")
    with open(tmp, "wb") as f:
        pickle.dump({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, f,
                    protocol=pickle.HIGHEST_PROTOCOL)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(run_dir, "state.pkl"))
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": step, "loss": loss, "time": time.time()}) + "\n")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    rng = random.Random(0)
    model = ClickModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    # On SIGTERM, unwind normally so the temporary directory is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with tempfile.TemporaryDirectory(prefix="fg-ctr-") as run_dir:
        spent = {"input": 0.0, "save": 0.0}
        deadline = time.monotonic() + SECONDS
        last_print = time.monotonic()
        step, t0 = 0, time.perf_counter()
        while time.monotonic() < deadline:
            a = time.perf_counter()
            ids, labels = get_batch(rng)
            b = time.perf_counter()
            loss = F.binary_cross_entropy_with_logits(model(ids), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            c = time.perf_counter()
            save_state(run_dir, step, model, opt, loss.item())
            d = time.perf_counter()
            step += 1
            spent["input"] += b - a
            spent["save"] += d - c
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
