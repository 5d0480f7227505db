"""A recommendation-style MLP whose dataset is an in-memory catalogue of Python records (a
dict with a list of tags per item), with `gc.collect()` called after every update "to keep
memory flat".

Problem: a full collection walks every live container object, and the catalogue holds
hundreds of thousands of them, so each `gc.collect()` costs several times the model's own
step. Nothing is wrong with the model, the data or the optimizer: the loop's own per-step
work outside forward/backward/update/input is most of the step.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
`gc.collect()` is 74-76% of the wall time (torch's own objects alone make a collection ~100 ms
here), making the batch under 1%, forward/backward/update the rest (350-370 ms steps at load 3-4).
"""
import gc
import os
import random
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.loop_work", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
ITEMS, TAGS, BATCH = 15_000, 64, 512


def catalogue(rng):
    """ITEMS records, each a dict with a tag list: the kind of metadata a real job keeps around."""
    return [{"id": i, "tags": [rng.randrange(TAGS) for _ in range(4)], "meta": {"clicks": rng.randrange(100)}}
            for i in range(ITEMS)]


class StepRecord:
    """A per-step bookkeeping object with a parent link: reference cycles, for the collector."""

    def __init__(self, step, parent=None):
        self.step, self.parent, self.children = step, parent, []
        if parent is not None:
            parent.children.append(self)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    rng = random.Random(0)
    items = catalogue(rng)
    features = torch.zeros(ITEMS, TAGS)
    for item in items:
        features[item["id"], item["tags"]] = 1.0
    teacher = torch.randn(TAGS)
    targets = ((features @ teacher + 0.5 * torch.randn(ITEMS)) > 0).float()  # a noisy linear rule

    model = nn.Sequential(nn.Linear(TAGS, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    spent = {"gc": 0.0, "input": 0.0}
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, t0 = 0, time.perf_counter()
    while time.monotonic() < deadline:
        a = time.perf_counter()
        idx = torch.randint(0, ITEMS, (BATCH,))
        x, y = features[idx], targets[idx]
        b = time.perf_counter()
        record = StepRecord(step)
        StepRecord(step, parent=record)  # a cycle: garbage once the step is over
        loss = F.binary_cross_entropy_with_logits(model(x).squeeze(-1), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        c = time.perf_counter()
        gc.collect()  # "keep memory flat": a full collection after every update
        d = time.perf_counter()
        step += 1
        spent["input"] += b - a
        spent["gc"] += d - c
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
