"""A Hugging Face `Trainer` fine-tuning a small GPT-2 built from a config (random weights,
nothing downloaded) on token batches already in memory, with `save_steps=1`: a full checkpoint
(weights, optimizer and scheduler state, RNG state, trainer state) written after every step,
as a "never lose a step" setting does.

Problem: the Trainer's save on the training thread is a large share of every step: the loop
waits for the disk. Found inside Trainer's own `_save_checkpoint`, not in the job's code.
"""
import os
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "host.blocking_io", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
LENGTH, VOCAB = 64, 2048


class Tokens(Dataset):
    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (256, LENGTH), generator=gen)

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        ids = self.ids[i % len(self.ids)]
        return {"input_ids": ids, "labels": ids}


class StopAfter(TrainerCallback):
    def __init__(self):
        self.deadline = time.monotonic() + SECONDS
        self.last_print = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.last_print >= 1.5:
            print(f"step {state.global_step}", flush=True)
            self.last_print = time.monotonic()
        if time.monotonic() > self.deadline:
            control.should_training_stop = True


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=128, n_layer=2, n_head=2)
    with tempfile.TemporaryDirectory(prefix="fg-hf-") as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=1_000_000,
                                 logging_steps=50, save_strategy="steps", save_steps=1, save_total_limit=1,
                                 report_to=[], use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(),
                callbacks=[StopAfter()]).train()


if __name__ == "__main__":
    main()
