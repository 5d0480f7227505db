"""A PyTorch Lightning regressor (a LightningModule over a wide MLP) trained with
`Trainer.fit` on CPU from an in-memory dataset, its progress bar and logging on.

Healthy: batches are ready at once (tensors in memory) and the model's own work is
most of each step; Lightning's per-step bookkeeping is a small share of it.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "conclusion": "device.compute_bound",
              "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, WIDTH, BATCH = 256, 2048, 256


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.GELU(),
                                 nn.Linear(WIDTH, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


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
    x = torch.randn(8192, FEATURES)
    y = x[:, :8].sum(dim=1, keepdim=True)
    with tempfile.TemporaryDirectory(prefix="fg-lightning-") as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, logger=False,
                            enable_checkpointing=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=[StopAfter()])
        trainer.fit(Regressor(), DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True))


if __name__ == "__main__":
    main()
