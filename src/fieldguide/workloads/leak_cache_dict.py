"""A keyword-spotting head trained on the features of a frozen 1-D conv encoder,
over a stream of synthetic audio clips read by a plain Python iterator.

The encoder is frozen, so its features are cached by clip id "to skip the
encoder when a clip comes round again".

Problem: the stream never repeats a clip (every clip id is new), so no lookup
ever hits and the cache is a dict that only grows: each step adds a batch of
feature tensors (detached, but alive) and the clips' first samples, about 160 KB a step, and
nothing is ever evicted. (At 32 KB a step the resident set of a job slowed by a busy box grew
too little and too unevenly for its growth to show from outside in a 10 s window.)
"""
import math
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
KEYWORDS, CLIP, BATCH, FEATURES = 12, 4000, 32, 256


class ClipStream:
    """Batches of (clip ids, waveforms, keyword labels): chirps at a keyword's pitch, in noise."""

    def __init__(self, seed=0):
        self.gen = torch.Generator().manual_seed(seed)
        self.next_id = 0
        self.t = torch.linspace(0, 1, CLIP)

    def __iter__(self):
        while True:
            labels = torch.randint(KEYWORDS, (BATCH,), generator=self.gen)
            pitch = 200 + 40 * labels.float().unsqueeze(1)
            wave = torch.sin(2 * math.pi * pitch * self.t * (1 + 0.3 * self.t))
            wave = wave + 0.5 * torch.randn(BATCH, CLIP, generator=self.gen)
            ids = range(self.next_id, self.next_id + BATCH)
            self.next_id += BATCH
            yield ids, wave.unsqueeze(1), labels


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    encoder = nn.Sequential(  # "pretrained", frozen
        nn.Conv1d(1, 32, 9, stride=4, padding=4), nn.GELU(),
        nn.Conv1d(32, 64, 9, stride=4, padding=4), nn.GELU(),
        nn.Conv1d(64, FEATURES, 5, stride=2, padding=2), nn.AdaptiveMaxPool1d(1), nn.Flatten(),
    ).eval().requires_grad_(False)
    head = nn.Sequential(nn.LayerNorm(FEATURES), nn.Linear(FEATURES, 128), nn.ReLU(), nn.Linear(128, KEYWORDS))
    opt = torch.optim.RMSprop(head.parameters(), lr=1e-3)
    feature_cache = {}
    hits = 0

    deadline = time.monotonic() + SECONDS
    try:
        for step, (ids, wave, labels) in enumerate(ClipStream(), start=1):
            if all(i in feature_cache for i in ids):
                feats = torch.stack([feature_cache[i][0] for i in ids])
                hits += 1
            else:
                with torch.no_grad():
                    feats = encoder(wave)
                for i, f, w in zip(ids, feats, wave, strict=True):
                    # never evicted, and the ids never come back; with a copy of the clip's first
                    # 1000 samples "to listen to a miss later"
                    feature_cache[i] = (f, w[:1000].clone())
            loss = F.cross_entropy(head(feats), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step % 50 == 0:
                print(f"step {step} loss {loss.item():.4f} cached {len(feature_cache)} hits {hits}", flush=True)
            if time.monotonic() >= deadline:
                break
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
