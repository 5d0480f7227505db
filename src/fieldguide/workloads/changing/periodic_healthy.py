"""A healthy job with the rhythm of a real trainer, and no problem: a DataLoader whose two
workers are started anew at every epoch (persistent_workers off), an evaluation pass every
EVAL_EVERY steps (a few seconds with no training step), and a checkpoint written with
torch.save every SAVE_EVERY steps. Nothing changes at FIELDGUIDE_CHANGE_AFTER_S: the watch must
take the rhythm for the job's own self and record no departure.

It stays the same job for as long as it runs: its samples are drawn afresh every epoch and
labelled by a fixed teacher with some noise (the loss settles, as a real run's does), and GELU
units never stop learning. With ReLU on a fixed random set, Adam's second moments of the weights
of dead units decayed (0.999 a step) into subnormal floats after ~80,000 steps, slow on a CPU:
unwatched, the job's steps went from 3.5 ms to 8 ms over eight minutes, most of it in Adam.
Subnormals are also flushed to zero, as a GPU's kernels do at no cost.
"""
import os
import signal
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

WATCH = {"playbook": None, "cause": None, "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "600"))
DIM, CLASSES, BATCH, N, N_VAL = 256, 10, 32, 8192, 65536
EVAL_EVERY, SAVE_EVERY = 6000, 4000
NOISE = 0.2  # the share of labels drawn at random: the loss cannot reach zero
TEACHER = torch.randn(DIM, CLASSES, generator=torch.Generator().manual_seed(1))


def label(x, coin, noise):
    return torch.where(coin < NOISE, noise, (x @ TEACHER).argmax(-1))


class Fresh(Dataset):
    """N new samples an epoch: a worker's random generator is seeded anew for each epoch. A
    batch's samples are drawn together (the DataLoader asks `__getitems__` for a batch), so
    the workers stay light beside the training process."""

    def __len__(self):
        return N

    def __getitems__(self, indices):
        n = len(indices)
        x = torch.randn(n, DIM)
        return list(zip(x, label(x, torch.rand(n), torch.randint(0, CLASSES, (n,))), strict=True))

    def __getitem__(self, i):
        return self.__getitems__([i])[0]


def held_out(n):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(n, DIM, generator=gen)
    return TensorDataset(x, label(x, torch.rand(n, generator=gen), torch.randint(0, CLASSES, (n,), generator=gen)))


def evaluate(model, loader):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(loader.dataset)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # the one training thread: no subnormal slow path (see above)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = nn.Sequential(nn.Linear(DIM, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, CLASSES))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = DataLoader(Fresh(), batch_size=BATCH, shuffle=True, num_workers=2)  # workers anew each epoch
    val = DataLoader(held_out(N_VAL), batch_size=256)
    started = time.monotonic()
    last_print, step, epoch = started, 0, 0
    with tempfile.TemporaryDirectory(prefix="fg-ckpt-") as ckpt:
        while time.monotonic() - started < SECONDS:
            epoch += 1
            for x, y in train:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                if step % EVAL_EVERY == 0:
                    print(f"eval at step {step}: accuracy {evaluate(model, val):.3f}", flush=True)
                if step % SAVE_EVERY == 0:
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step},
                               os.path.join(ckpt, "last.pt"))
                now = time.monotonic()
                if now - last_print >= 2:
                    print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
                    last_print = now
                if now - started >= SECONDS:
                    break


if __name__ == "__main__":
    main()
