"""A PyTorch Lightning classifier trained with `Trainer.fit` on 2 CPU processes with Lightning's
own DDP (`strategy="ddp"`, `devices=2`): Lightning starts the second rank itself, re-running
this script, with no torchrun.

Problem: the dataset reads each sample from a (simulated) remote store, 3 ms a round trip, in
each rank's training process (num_workers=0): both ranks wait for their batches most of every
step. The ranks, training and the input wait must be found inside the framework's own launcher
and loop.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, CLASSES, BATCH = 32, 4, 8
READ_LATENCY_S = 0.003


class RemoteRows(Dataset):
    def __len__(self):
        return 8192

    def __getitem__(self, i):
        time.sleep(READ_LATENCY_S)  # one round trip to the store: waiting, not CPU
        g = torch.Generator().manual_seed(i)
        return torch.randn(FEATURES, generator=g), i % CLASSES


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, CLASSES))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True, sync_dist=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


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
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1000, logger=False,
                        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False,
                        default_root_dir=root, callbacks=[StopAfter()])
    trainer.fit(Classifier(), DataLoader(RemoteRows(), batch_size=BATCH, shuffle=True, num_workers=0))


if __name__ == "__main__":
    main()
