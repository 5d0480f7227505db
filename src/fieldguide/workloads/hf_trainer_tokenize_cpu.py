"""A Hugging Face `Trainer` fine-tuning a tiny GPT-2 built from a config (random
weights, nothing downloaded) on text that its dataset tokenizes on the fly: a
character-pair tokenizer written in Python, run in `__getitem__`, in the training
process (dataloader_num_workers=0).

Problem: tokenizing each sample costs more Python CPU than the tiny model's step:
the Trainer's loop is starved by batch production.
"""
import os
import random
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.cpu_bound", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
LENGTH, VOCAB = 32, 512


class PairTokenized(Dataset):
    """Each sample: random text, split into character pairs by a slow Python merge loop."""

    def __init__(self):
        rng = random.Random(0)
        letters = "etaoinshrdlu"
        self.pairs = {a + b: i + 1 for i, (a, b) in enumerate((a, b) for a in letters for b in letters)}
        self.texts = ["".join(rng.choice(letters) for _ in range(LENGTH * 24)) for _ in range(64)]

    def __len__(self):
        return 100_000

    def tokenize(self, text):
        ids = []
        for _ in range(12):  # repeated passes, as a merge-based tokenizer makes them
            ids = [self.pairs.get(text[i:i + 2], 0) % VOCAB for i in range(0, len(text) - 1, 2)]
        return ids

    def __getitem__(self, i):
        ids = torch.tensor(self.tokenize(self.texts[i % len(self.texts)])[:LENGTH])
        return {"input_ids": ids, "labels": ids.clone()}


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
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=64, n_layer=2, n_head=2)
    with tempfile.TemporaryDirectory(prefix="fg-hf-") as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=1_000_000,
                                 logging_steps=50, save_strategy="no", report_to=[], use_cpu=True,
                                 dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=PairTokenized(),
                callbacks=[StopAfter()]).train()


if __name__ == "__main__":
    main()
