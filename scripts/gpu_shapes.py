"""GPU trainers shaped like real ones, for `scripts/gpu-shapes` (both eyes on one job, on a GPU).

python scripts/gpu_shapes.py SHAPE [SECONDS], SHAPE one of:
  prefetch_wait  nanoGPT-style: the next batch is fetched between the forward and the backward,
                 from a store that answers in 30 ms (waiting, not CPU)    -> input.waiting
  ckpt_mid       a full checkpoint (model + AdamW) written after the backward, before the update,
                 every iteration                                         -> host.blocking_io
  healthy        the same model, batches already on the device           -> no cause
"""
import os
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch import nn

SHAPE = sys.argv[1]
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 90.0
DEV = os.environ.get("GPU_SHAPES_DEVICE", "cuda")
VOCAB, WIDTH, SEQ, BATCH = 4096, 512, 256, 32


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 8, 4 * WIDTH, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        return self.head(self.blocks(self.embed(idx), is_causal=True,
                                     mask=nn.Transformer.generate_square_subsequent_mask(SEQ, device=DEV)))


def get_batch(gen):
    if SHAPE == "prefetch_wait":
        time.sleep(0.03)  # the store's round trip
    x = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen)
    x = (x.pin_memory() if DEV == "cuda" else x).to(DEV, non_blocking=True)
    return x[:, :-1], x[:, 1:]


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = TinyGPT().to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ckpt = os.path.join(tempfile.mkdtemp(prefix="fg-gpu-shape-"), "last.pt")
    fixed = get_batch(gen)
    x, y = fixed
    deadline = time.monotonic() + SECONDS
    step = 0
    while time.monotonic() < deadline:
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, VOCAB), y.reshape(-1))
        if SHAPE == "prefetch_wait":
            x, y = get_batch(gen)  # the next batch while the device runs the forward
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if SHAPE == "ckpt_mid":
            torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, ckpt)
        opt.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    os.remove(ckpt) if os.path.exists(ckpt) else None


if __name__ == "__main__":
    main()
