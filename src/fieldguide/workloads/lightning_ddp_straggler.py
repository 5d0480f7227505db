"""A PyTorch Lightning classifier trained with `Trainer.fit` on 2 CPU processes with Lightning's
own DDP (`strategy="ddp"`, `devices=2`): Lightning starts the second rank itself, re-running this
script, with no torchrun and no RANK in its environment.

Problem: rank 1 alone posts its metrics to a (simulated) tracking server after every step, a
blocking 40 ms round trip; rank 0 finishes its step and waits in the next gradient all-reduce
for it, so the whole job runs at rank 1's pace. The ranks must be found inside the framework's
own launcher, and the one the other waits for named, though its extra time is a wait of its own
after the update, not its input.
"""
import os
import tempfile
import time
import warnings

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "dist.straggler", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, WIDTH, CLASSES, BATCH, BATCHES = 256, 1024, 4, 1024, 32
POST_LATENCY_S, SLOW_RANK = 0.040, 1


class Batches(Dataset):
    """Whole batches already in memory: the loader hands each one over at once."""

    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(BATCHES, BATCH, FEATURES, generator=gen)
        self.y = torch.randint(0, CLASSES, (BATCHES, BATCH), generator=gen)

    def __len__(self):
        return BATCHES

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, WIDTH), nn.ReLU(), nn.Linear(WIDTH, CLASSES))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class PostMetrics(L.Callback):
    """Rank 1 reports its loss to a tracking server, synchronously, after every step."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_rank == SLOW_RANK:
            time.sleep(POST_LATENCY_S)  # the blocking HTTP round trip: waiting, not CPU


class StopAfter(L.Callback):
    """End fit after SECONDS on every rank at the same step (a rank that stopped alone would hang
    the other in its next all-reduce)."""

    def __init__(self):
        self.deadline = time.monotonic() + SECONDS
        self.last_print = time.monotonic()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.is_global_zero and time.monotonic() - self.last_print >= 1.5:
            print(f"step {trainer.global_step} loss {float(outputs['loss']):.4f}", flush=True)
            self.last_print = time.monotonic()
        stop = torch.tensor(float(time.monotonic() > self.deadline))
        trainer.should_stop = bool(trainer.strategy.reduce(stop, reduce_op="max") > 0)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    root = os.environ.setdefault("FG_LIGHTNING_ROOT", tempfile.mkdtemp(prefix="fg-lightning-ddp-"))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=10_000, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False,
                        default_root_dir=root, callbacks=[PostMetrics(), StopAfter()])
    trainer.fit(Classifier(), DataLoader(Batches(), batch_size=None, num_workers=0))


if __name__ == "__main__":
    main()
