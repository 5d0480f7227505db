"""A steady CPU training job that keeps its own step clock, for observer_effect.py.

usage: OBSERVER_LOG=PATH OBSERVER_WIDTH=N [OBSERVER_SECONDS=60] python benchmarks/observer_job.py
       (under torchrun: each rank, gloo DDP, writes PATH.rankR)

An MLP (256 -> WIDTH -> WIDTH -> 10) on one intra-op thread, fed by a DataLoader over tensors in
RAM (no workers: the batch is made on the training thread, as in many small jobs). The end of
every step (time.monotonic(), the system-wide clock) is kept in a list and appended to the log
four times a second: the same small cost in every arm of the benchmark.
"""

import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    width = int(os.environ.get("OBSERVER_WIDTH", "256"))
    seconds = float(os.environ.get("OBSERVER_SECONDS", "60"))
    log_path = os.environ["OBSERVER_LOG"]
    ranked = "LOCAL_RANK" in os.environ
    model: nn.Module = nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                     nn.Linear(width, 10))
    if ranked:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        log_path += f".rank{dist.get_rank()}"
        model = DistributedDataParallel(model)
    x = torch.randn(8192, 256)
    y = torch.randint(0, 10, (8192,))
    loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ends: list[float] = []
    start = last_write = time.monotonic()
    with open(log_path, "a") as log:
        while time.monotonic() - start < seconds:
            for xb, yb in loader:
                loss = nn.functional.cross_entropy(model(xb), yb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                now = time.monotonic()
                ends.append(now)
                if now - last_write >= 0.25:
                    log.write("".join(f"{t:.6f}\n" for t in ends))
                    log.flush()
                    ends.clear()
                    last_write = now
                if now - start >= seconds:
                    break
        log.write("".join(f"{t:.6f}\n" for t in ends))
    if ranked:
        import torch.distributed as dist

        dist.destroy_process_group()


if __name__ == "__main__":
    main()
