"""A PyTorch Lightning classifier (a LightningModule over a small MLP) trained with
`Trainer.fit` on CPU, its progress bar and its own per-step bookkeeping on.

Problem: the dataset reads each sample from a (simulated) remote store, 3 ms a
round trip, in the training process (num_workers=0): Lightning's fit loop waits
for each batch most of every step. Training and input must be recognised inside
the framework's loop, not in the script's own code.
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
        return 4096

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
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class StopAfter(L.Callback):
    """End fit after SECONDS, as a job that is diagnosed and then stopped."""

    def __init__(self):
        self.deadline = time.monotonic() + SECONDS
        self.last_print = time.monotonic()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if time.monotonic() - self.last_print >= 1.5:
            print(f"step {trainer.global_step} loss {float(outputs['loss']):.4f}", flush=True)
            self.last_print = time.monotonic()
        if time.monotonic() > self.deadline:
            trainer.should_stop = True


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    with tempfile.TemporaryDirectory(prefix="fg-lightning-") as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, logger=False,
                            enable_checkpointing=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=[StopAfter()])
        trainer.fit(Classifier(), DataLoader(RemoteRows(), batch_size=BATCH, shuffle=True, num_workers=0))


if __name__ == "__main__":
    main()
