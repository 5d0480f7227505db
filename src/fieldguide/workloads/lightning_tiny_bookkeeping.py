"""A PyTorch Lightning logistic regression on 32 features, trained with `Trainer.fit` on CPU from
an in-memory dataset, its progress bar refreshed and six metrics logged every step.

Problem: the model's own step is tens of microseconds; Lightning's per-step bookkeeping
(its loops, hooks and callbacks, `self.log` of six metrics, the progress bar) is most of each
step. That is framework overhead, not input: the batches are in memory and come at once.
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
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.overhead_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
FEATURES, BATCH = 32, 32


class LogisticRegression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.linear(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logits, y)
        with torch.no_grad():
            predicted = logits > 0
            self.log("loss", loss, prog_bar=True)
            self.log("accuracy", (predicted == y.bool()).float().mean(), prog_bar=True)
            self.log("positive_rate", predicted.float().mean())
            self.log("logit_mean", logits.mean())
            self.log("logit_std", logits.std())
            self.log("weight_norm", self.linear.weight.norm())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


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
    x = torch.randn(16384, FEATURES)
    y = (x[:, :4].sum(dim=1) > 0).float()
    with tempfile.TemporaryDirectory(prefix="fg-lightning-") as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1000, logger=False,
                            enable_checkpointing=False, enable_model_summary=False, default_root_dir=root,
                            callbacks=[StopAfter()])
        trainer.fit(LogisticRegression(), DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True))


if __name__ == "__main__":
    main()
