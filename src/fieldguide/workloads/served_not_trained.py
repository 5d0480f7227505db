"""A text-embedding model being served, not trained: a client thread puts requests
(batches of token ids) on a queue, and the main thread answers each one in eval mode
under torch.no_grad(). There is no backward and no optimizer.

Not a training job, so nothing here is a training problem: a walk must stop at its
first question (is the target training?) and end inconclusive, naming no cause.
"""
import os
import queue
import random
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": None, "verdict": "inconclusive", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
VOCAB, WIDTH, MAX_LEN = 4096, 256, 48
REQUEST_GAP_S = 0.008  # a client's think time between requests


class Embedder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.mix = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        self.norm = nn.LayerNorm(WIDTH)

    def forward(self, ids, mask):
        h = self.norm(self.tok(ids) + self.mix(self.tok(ids)))
        pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        return F.normalize(pooled, dim=-1)


def client(requests, stop):
    """Sends requests of 1-16 texts of random length, then waits a little."""
    rng = random.Random(2)
    while not stop.is_set():
        texts = [[rng.randrange(VOCAB) for _ in range(rng.randint(4, MAX_LEN))] for _ in range(rng.randint(1, 16))]
        reply = queue.Queue(maxsize=1)
        requests.put((texts, reply))
        reply.get()
        time.sleep(REQUEST_GAP_S)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    model = Embedder().eval()
    requests = queue.Queue()
    stop = threading.Event()
    threading.Thread(target=client, args=(requests, stop), daemon=True).start()

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    served = 0
    while time.monotonic() < deadline:
        try:
            texts, reply = requests.get(timeout=0.5)
        except queue.Empty:
            continue
        ids = torch.zeros(len(texts), MAX_LEN, dtype=torch.long)
        mask = torch.zeros(len(texts), MAX_LEN)
        for i, t in enumerate(texts):
            ids[i, :len(t)] = torch.tensor(t)
            mask[i, :len(t)] = 1
        with torch.no_grad():
            reply.put(model(ids, mask))
        served += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"served {served} requests", flush=True)
            last_print = now
    stop.set()


if __name__ == "__main__":
    main()
