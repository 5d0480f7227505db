"""The agent's per-step cost, hook by hook, in microseconds (min of repeats: robust on a noisy box).

usage: python benchmarks/agent_hooks.py

What a training step pays for the agent is what its hooks do on the training thread:
the optimizer step post-hook (a step boundary), and the DataLoader __next__ wrapper
(the wait for a batch). Each is timed against the same call without it, interleaved.
Divide by your step time for the share: 3 us of a 10 ms step is 0.03%.
"""

from __future__ import annotations

import socket
import timeit

import torch
from torch.utils.data import DataLoader, TensorDataset, dataloader

from fieldguide.agent.inside.core import Agent

REPEATS = 7


def best(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=REPEATS)) / number * 1e6


def main() -> None:
    inside, outside = socket.socketpair()
    agent = Agent(inside)
    agent.start()
    loop = agent.capabilities["loop"]
    torch.set_num_threads(1)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    plain_step = best(opt.step, 20000)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    handle = register_optimizer_step_post_hook(loop.on_optimizer_step)
    hooked_step = best(opt.step, 20000)
    handle.remove()
    loop.steps.clear()

    loader = DataLoader(TensorDataset(torch.randn(4096, 4)), batch_size=1)

    def epoch() -> None:
        for _ in loader:
            pass

    base_next, base_iter = dataloader._BaseDataLoaderIter.__next__, dataloader.DataLoader.__iter__
    plain_batch = best(epoch, 3) / len(loader)
    loop.primary_optimizer = 1  # as in a job that steps an optimizer: batches are not boundaries
    loop.patch_dataloader()
    hooked_batch = best(epoch, 3) / len(loader)
    dataloader._BaseDataLoaderIter.__next__, dataloader.DataLoader.__iter__ = base_next, base_iter
    print(f"optimizer.step      {plain_step:7.2f} us plain, {hooked_step:7.2f} us with the agent's post-hook: "
          f"{hooked_step - plain_step:+.2f} us per step")
    print(f"DataLoader batch    {plain_batch:7.2f} us plain, {hooked_batch:7.2f} us with the agent's wrapper: "
          f"{hooked_batch - plain_batch:+.2f} us per batch")
    print(f"per step in all: {hooked_step - plain_step + hooked_batch - plain_batch:+.2f} us "
          f"({(hooked_step - plain_step + hooked_batch - plain_batch) / 10_000:.3%} of a 10 ms step)")
    inside.close()
    outside.close()


if __name__ == "__main__":
    main()
