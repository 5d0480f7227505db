"""A small hand-rolled `Trainer` with a list of callbacks (progress, early stopping, and a
"prediction stats" callback), training a text-classifier-shaped MLP on bag-of-words vectors.

Problem: `PredictionStats.on_step_end` keeps a running confusion matrix and per-class
precision/recall, and the median of the recent losses, in pure Python over `.tolist()` of the
batch's scores, every step. The other callbacks are cheap; this one is a large share of each
step, outside forward/backward/update and input, inside the trainer's callback loop.

Measured on a 2-core box without fieldguide (FIELDGUIDE_WORKLOAD_TIMING=1 prints them):
the callbacks are 44-45% of the wall time (nearly all of it `PredictionStats.on_step_end`),
slicing the batch ~1%, forward/backward/update the rest (4-7 ms steps at load 4).
"""
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.loop_work", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
TIMING = os.environ.get("FIELDGUIDE_WORKLOAD_TIMING") == "1"  # print each part's share of the time
VOCAB, CLASSES, BATCH, RECENT, BINS = 400, 20, 256, 500, 10


class Callback:
    def on_step_end(self, trainer, state):
        pass


class Progress(Callback):
    def __init__(self):
        self.last = time.monotonic()

    def on_step_end(self, trainer, state):
        if time.monotonic() - self.last >= 1.5:
            print(f"step {state['step']} loss {state['loss']:.4f}", flush=True)
            self.last = time.monotonic()


class EarlyStopping(Callback):
    def __init__(self, patience=10_000):
        self.best, self.waited, self.patience = float("inf"), 0, patience

    def on_step_end(self, trainer, state):
        if state["loss"] < self.best - 1e-4:
            self.best, self.waited = state["loss"], 0
        else:
            self.waited += 1
        trainer.should_stop |= self.waited > self.patience


class PredictionStats(Callback):
    """Running confusion and class-affinity matrices, calibration bins, per-class precision/recall,
    the recent losses' median."""

    def __init__(self):
        self.confusion = [[0] * CLASSES for _ in range(CLASSES)]
        self.calibration = [[0, 0.0, 0] for _ in range(BINS)]  # count, confidence sum, correct
        self.affinity = [[0.0] * CLASSES for _ in range(CLASSES)]  # summed probabilities, by true class
        self.losses = []

    def on_step_end(self, trainer, state):
        scores, labels = state["scores"].tolist(), state["labels"].tolist()
        for row, label in zip(scores, labels, strict=True):
            top = max(row)
            weights = [math.exp(v - top) for v in row]
            ranked = sorted(range(CLASSES), key=row.__getitem__, reverse=True)
            norm = sum(weights)
            confidence = weights[ranked[0]] / norm
            sums = self.affinity[label]
            for c in range(CLASSES):
                sums[c] += weights[c] / norm
            self.confusion[label][ranked[0]] += 1
            cell = self.calibration[min(BINS - 1, int(confidence * BINS))]
            cell[0], cell[1], cell[2] = cell[0] + 1, cell[1] + confidence, cell[2] + (ranked[0] == label)
            state.setdefault("top5", 0)
            state["top5"] += label in ranked[:5]
        recall = [self.confusion[c][c] / max(1, sum(self.confusion[c])) for c in range(CLASSES)]
        precision = [self.confusion[c][c] / max(1, sum(r[c] for r in self.confusion)) for c in range(CLASSES)]
        total = sum(cell[0] for cell in self.calibration)
        state["ece"] = sum(abs(cell[1] - cell[2]) for cell in self.calibration) / max(1, total)
        self.losses = self.losses[-(RECENT - 1):] + [state["loss"]]
        state["median_loss"] = sorted(self.losses)[len(self.losses) // 2]
        state["macro_f1"] = sum(2 * p * r / max(p + r, 1e-12) for p, r in zip(precision, recall, strict=True)) / CLASSES


class Trainer:
    def __init__(self, model, opt, callbacks):
        self.model, self.opt, self.callbacks = model, opt, callbacks
        self.should_stop = False

    def fit(self, x_all, y_all, seconds):
        spent = {"callbacks": 0.0, "input": 0.0}
        deadline = time.monotonic() + seconds
        step, t0, last_print = 0, time.perf_counter(), time.monotonic()
        while time.monotonic() < deadline and not self.should_stop:
            a = time.perf_counter()
            i = (step * BATCH) % (len(x_all) - BATCH)
            xb, yb = x_all[i:i + BATCH], y_all[i:i + BATCH]
            b = time.perf_counter()
            scores = self.model(xb)
            loss = F.cross_entropy(scores, yb)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            c = time.perf_counter()
            state = {"step": step + 1, "loss": loss.item(), "scores": scores.detach(), "labels": yb}
            for callback in self.callbacks:
                callback.on_step_end(self, state)
            d = time.perf_counter()
            step += 1
            spent["input"] += b - a
            spent["callbacks"] += d - c
            if step == 10:  # shares from step 10 on: past the first steps' warm-up
                t0, spent = time.perf_counter(), dict.fromkeys(spent, 0.0)
            if TIMING and step > 10 and time.monotonic() - last_print >= 1.5:
                wall = time.perf_counter() - t0
                print("  " + " ".join(f"{k} {v / wall:.0%}" for k, v in spent.items())
                      + f" step {wall / (step - 10) * 1e3:.1f} ms", flush=True)
                last_print = time.monotonic()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    n = 16384
    topics = torch.randint(0, CLASSES, (n,))
    x_all = (torch.rand(n, VOCAB) < 0.01).float()  # sparse bag-of-words background
    x_all[torch.arange(n).view(-1, 1), topics.view(-1, 1) * 20 + torch.randint(0, 20, (n, 3))] = 1.0
    model = nn.Sequential(nn.Linear(VOCAB, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    Trainer(model, opt, [Progress(), EarlyStopping(), PredictionStats()]).fit(x_all, topics, SECONDS)


if __name__ == "__main__":
    main()
