"""A PyTorch Lightning classifier whose `training_step` keeps each step's logits in a list on
the module, "to compute an epoch metric at the end", trained with `Trainer.fit` on CPU.

Problem: the kept logits are still attached to the autograd graph: each one holds its step's
activations alive. Memory grows every step until the epoch ends (or the job runs out).
"""
import os
import tempfile
import time

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, WIDTH, CLASSES, BATCH = 128, 512, 32, 64


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                                 nn.Linear(WIDTH, CLASSES))
        self.epoch_logits = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.epoch_logits.append(logits)  # not detached: the step's graph stays alive with it
        loss = F.cross_entropy(logits, y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def on_train_epoch_end(self):
        self.epoch_logits.clear()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class StopAfter(L.Callback):
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
    x = torch.randn(BATCH * 4000, FEATURES)  # one epoch is far longer than any walk
    y = torch.randint(0, CLASSES, (len(x),))
    with tempfile.TemporaryDirectory(prefix="fg-lightning-") as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, logger=False,
                            enable_checkpointing=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=[StopAfter()])
        trainer.fit(Classifier(), DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True))


if __name__ == "__main__":
    main()
