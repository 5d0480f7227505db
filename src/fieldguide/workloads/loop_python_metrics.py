"""An MLP classifier with "activation health" monitoring: a forward hook keeps each hidden
layer's output, and after every update `activation_report()` turns a sample of them into
per-unit dead-unit counts and a histogram, in pure Python over `.tolist()`.

Problem: the monitoring walks every activation value of the sample in Python each step, which
costs about as much as the whole forward/backward/update. Nothing is wrong with the model, the
data or the optimizer: the loop's own per-step bookkeeping is a large share of the step.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
`activation_report()` is 55-58% of the wall time, slicing the batch under 1%,
forward/backward/update the rest (7.5-8.5 ms steps at load 4).
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.loop_work", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
IN, HIDDEN, CLASSES, BATCH, BINS = 128, 256, 10, 128, 16
SAMPLE = 28  # rows of each batch the monitoring looks at


def activation_report(captured):
    """Per layer: the fraction of units that never fired on a sample of the batch, and a histogram."""
    report = {}
    for name, act in captured.items():
        rows = act[:SAMPLE].tolist()
        fired = [0] * len(rows[0])
        hist = [0] * BINS
        top = max(max(row) for row in rows) + 1e-12
        for row in rows:
            for unit, value in enumerate(row):
                if value > 0.0:
                    fired[unit] += 1
                    hist[min(BINS - 1, int(value / top * BINS))] += 1
        report[name] = {"dead": sum(f == 0 for f in fired) / len(fired), "hist": hist}
    return report


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    x_all = torch.randn(32768, IN)
    y_all = (x_all[:, :CLASSES] + 0.3 * torch.randn(32768, CLASSES)).argmax(1)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    captured = {}
    for name, module in model.named_children():
        if isinstance(module, nn.ReLU):
            module.register_forward_hook(lambda mod, args, out, name=name: captured.__setitem__(name, out.detach()))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    spent = {"metrics": 0.0, "input": 0.0}
    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step, t0, dead = 0, time.perf_counter(), 0.0
    while time.monotonic() < deadline:
        a = time.perf_counter()
        i = (step * BATCH) % (len(x_all) - BATCH)
        xb, yb = x_all[i:i + BATCH], y_all[i:i + BATCH]
        b = time.perf_counter()
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        c = time.perf_counter()
        report = activation_report(captured)
        dead = max(r["dead"] for r in report.values())
        d = time.perf_counter()
        step += 1
        spent["input"] += b - a
        spent["metrics"] += d - c
        if step == 10:  # shares from step 10 on: past the first steps' warm-up
            t0, spent = time.perf_counter(), dict.fromkeys(spent, 0.0)
        if time.monotonic() - last_print >= 1.5:
            print(f"step {step} loss {loss.item():.4f} dead units {dead:.1%}", flush=True)
            if TIMING and step > 10:
                wall = time.perf_counter() - t0
                print("  " + " ".join(f"{k} {v / wall:.0%}" for k, v in spent.items())
                      + f" step {wall / (step - 10) * 1e3:.1f} ms", flush=True)
            last_print = time.monotonic()


if __name__ == "__main__":
    main()
