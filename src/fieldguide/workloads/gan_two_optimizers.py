"""A small MLP GAN learning 16x16 "sensor heat maps" (random Gaussian blobs), with a
generator and a discriminator trained by two Adam optimizers, and no DataLoader.

Problem: each real batch is fetched from a (simulated) remote sample store by
`fetch_real_batch()` on the training thread, and every fetch waits ~30 ms on storage
latency: both networks sit idle while the loop waits for data.
"""
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

# What a diagnosis must find, in which modes (read with ast, never by importing this file).
FIELDGUIDE = {"playbook": "slow-training", "cause": "input.waiting", "modes": ["launch", "attach"]}

SECONDS = float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "120"))
SIDE, LATENT, BATCH = 16, 64, 256
STORE_LATENCY_S = 0.030  # one request to the sample store per batch


class SampleStore:
    """Stands in for a remote store of heat maps: requests wait, the maps are synthesized."""

    def __init__(self):
        self.gen = torch.Generator().manual_seed(7)
        coords = torch.arange(SIDE, dtype=torch.float32)
        self.yy, self.xx = torch.meshgrid(coords, coords, indexing="ij")

    def fetch_real_batch(self):
        time.sleep(STORE_LATENCY_S)  # request round trip and storage latency
        centers = torch.rand(BATCH, 2, 1, 1, generator=self.gen) * (SIDE - 4) + 2
        spread = torch.rand(BATCH, 1, 1, generator=self.gen) * 2 + 1.5
        d2 = (self.xx - centers[:, 0]) ** 2 + (self.yy - centers[:, 1]) ** 2
        maps = torch.exp(-d2 / (2 * spread ** 2))
        return (maps * 2 - 1).view(BATCH, SIDE * SIDE)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)  # single-threaded kernels (shared 2-core box)
    store = SampleStore()
    gen = nn.Sequential(nn.Linear(LATENT, 512), nn.LeakyReLU(0.2), nn.Linear(512, 512), nn.LeakyReLU(0.2),
                        nn.Linear(512, SIDE * SIDE), nn.Tanh())
    disc = nn.Sequential(nn.Linear(SIDE * SIDE, 512), nn.LeakyReLU(0.2), nn.Linear(512, 512), nn.LeakyReLU(0.2),
                         nn.Linear(512, 1))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    ones, zeros = torch.ones(BATCH, 1), torch.zeros(BATCH, 1)

    deadline = time.monotonic() + SECONDS
    last_print = time.monotonic()
    step = 0
    while True:
        real = store.fetch_real_batch()
        fake = gen(torch.randn(BATCH, LATENT))

        # Discriminator: real maps toward 1, generated ones toward 0.
        d_loss = (F.binary_cross_entropy_with_logits(disc(real), ones)
                  + F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros))
        opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        opt_d.step()

        # Generator: make the discriminator call its maps real.
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        opt_g.step()

        step += 1
        now = time.monotonic()
        if now - last_print >= 1.5:
            print(f"step {step} d_loss {d_loss.item():.4f} g_loss {g_loss.item():.4f}", flush=True)
            last_print = now
        if now >= deadline:
            break


if __name__ == "__main__":
    main()
