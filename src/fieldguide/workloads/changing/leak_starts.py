"""A regression MLP on generated batches that runs flat until FIELDGUIDE_CHANGE_AFTER_S, when a
"debug" hook starts keeping every 5th step's model output for a later plot: the output
tensor, with its autograd graph, stays alive across steps, and memory climbs from then on.
"""
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

try:  # run as a file (the helper is beside it) or as a module (-m fieldguide.workloads.changing.X)
    from _change import CHANGE_AFTER_S, mark_change
except ModuleNotFoundError:
    from fieldguide.workloads.changing._change import CHANGE_AFTER_S, mark_change
from torch import nn

WATCH = {"playbook": "oom", "cause": "memory.leak_across_steps", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "600"))
FEATURES, BATCH, KEEP_EVERY = 64, 512, 5



def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = nn.Sequential(nn.Linear(FEATURES, 512), nn.SiLU(), nn.Linear(512, 512), nn.SiLU(), nn.Linear(512, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    w = torch.randn(FEATURES, 64, generator=gen) / FEATURES ** 0.5
    kept = []  # the outputs kept "for a plot at the end"
    started = time.monotonic()
    last_print, step, changed = started, 0, False
    while time.monotonic() - started < SECONDS:
        x = torch.randn(BATCH, FEATURES, generator=gen)
        out = model(x)
        loss = F.mse_loss(out, torch.tanh(x @ w))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        now = time.monotonic()
        if not changed and now - started >= CHANGE_AFTER_S:
            changed = True
            mark_change(step)
        if changed and step % KEEP_EVERY == 0:
            kept.append(out)  # not detached: the graph behind it is kept too
        if now - last_print >= 2:
            print(f"step {step} loss {loss.item():.4f} kept {len(kept)}", flush=True)
            last_print = now


if __name__ == "__main__":
    main()
