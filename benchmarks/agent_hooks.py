"""The agent's per-step cost on the training thread, in microseconds, with and without its hooks
interleaved (this box drifts by tens of microseconds between back-to-back timings).

usage: python benchmarks/agent_hooks.py [--rounds 31] [--layers 2]

A tiny training step (a 64->64 MLP of --layers layers on one fixed batch, ~0.2 ms at 2: the
worst case for a per-step cost; more layers, more module calls for a per-call hook to cost) is timed in blocks, round after round, four ways: plain; with the agent's torch hooks as
a launch installs them (the optimizer step pre/post-hooks that end a step, the wrapper on
torch.autograd.backward, the forward pre-hook on the outermost module, the torch.save and
DataLoader wrappers); with the memory capability armed as the oom playbook arms it (a
saved-tensor pack hook); and with the hooks and the input-phase sampler on (50 Hz, as a walk's
loop.steps runs it; the step builds its batch in Python, an input phase for it to sample). The hooks are switched off and on between blocks by swapping them
out, so each round compares the four on the same machine state, in a rotating order. Printed: the median of the
per-round differences, with quartiles; divide by your step time for the share.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import threading
import time

import torch
from torch.nn.modules import module as nn_module
from torch.optim import optimizer as optim_module

from fieldguide.agent.inside.core import Agent

BLOCK = 300


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    layers: list[torch.nn.Module] = [torch.nn.Linear(64, 64)]
    for _ in range(args.layers - 1):
        layers += [torch.nn.ReLU(), torch.nn.Linear(64, 64)]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 64)

    def step() -> None:
        xb = torch.stack([x[i] for i in range(len(x))])  # an input phase in Python, for the sampler to see
        loss = model(xb).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    inside, outside = socket.socketpair()
    threading.Thread(target=lambda: [None for _ in iter(lambda: outside.recv(65536), b"")], daemon=True).start()
    os.environ["FIELDGUIDE_AGENT_ARM"] = ""
    plain_backward = torch.autograd.backward
    agent = Agent(inside)
    agent.start()
    threading.Thread(target=agent.serve, daemon=True).start()
    agent.hook_torch(torch)
    for _ in range(30):
        step()  # past the discovery of the outermost module
    memory = agent.capabilities["memory"]
    memory.arm(frozenset())
    hooked = {"backward": torch.autograd.backward, "pre": dict(optim_module._global_optimizer_pre_hooks),
              "post": dict(optim_module._global_optimizer_post_hooks), "forward": dict(model._forward_pre_hooks),
              "global_pre": dict(nn_module._global_forward_pre_hooks),
              "global_post": dict(nn_module._global_forward_hooks)}

    def switch(on: bool, armed: bool = False) -> None:
        torch.autograd.backward = hooked["backward"] if on else plain_backward
        for table, key in ((optim_module._global_optimizer_pre_hooks, "pre"),
                           (optim_module._global_optimizer_post_hooks, "post"),
                           (model._forward_pre_hooks, "forward"),
                           (nn_module._global_forward_pre_hooks, "global_pre"),
                           (nn_module._global_forward_hooks, "global_post")):
            table.clear()
            if on:
                table.update(hooked[key])
        if armed and not memory.tracking:
            memory.push_pack_hook()
        elif not armed and memory.tracking:
            memory.pop_pack_hook()

    def block() -> float:
        t0 = time.perf_counter()
        for _ in range(BLOCK):
            step()
        return (time.perf_counter() - t0) / BLOCK * 1e6

    loop = agent.capabilities["loop"]

    def sampled_block() -> float:
        """A block with the input-phase sampler on (50 Hz, as a walk's loop.steps asks), for as
        long as the last plain block took; the next block waits for it to end."""
        loop.on_request("input_stacks", "bench", {"seconds": statistics.median(plain) * BLOCK / 1e6, "rate": 50})
        took = block()
        while loop.sampling:
            time.sleep(0.01)
        return took

    plain, hooks, armed, sampled = [], [], [], []
    conditions = [(plain, False, False, block), (hooks, True, False, block), (armed, True, True, block),
                  (sampled, True, False, sampled_block)]
    plain.append(block())
    for i in range(args.rounds):
        for times, on, arm, run in conditions[i % 4:] + conditions[:i % 4]:  # each order as often
            switch(on, armed=arm)
            times.append(run())
        switch(True)
    plain.pop(0)
    agent.disabled = True

    def spread(diffs: list[float]) -> str:
        q = statistics.quantiles(diffs, n=4)
        return f"{statistics.median(diffs):+.1f} us (quartiles {q[0]:+.1f} .. {q[2]:+.1f})"

    step_us = statistics.median(plain)
    hook_cost = [h - p for h, p in zip(hooks, plain, strict=True)]
    arm_cost = [a - h for a, h in zip(armed, hooks, strict=True)]
    sample_cost = [s - p for s, p in zip(sampled, plain, strict=True)]
    print(f"tiny step plain ({sum(1 for _ in model.modules())} modules; global module hooks left on: "
          f"{len(hooked['global_pre']) + len(hooked['global_post'])}): median {step_us:.1f} us "
          f"over {args.rounds} rounds of {BLOCK} steps")
    print(f"the agent's hooks:      {spread(hook_cost)} per step")
    print(f"memory armed (oom):     {spread(arm_cost)} per step more")
    print(f"hooks + input sampler:  {spread(sample_cost)} per step (sampler at 50 Hz, as in a walk)")
    # The sampler costs per second, not per step: its share of the job's time, whatever the step.
    sampler_share = [(s_ - h) / h for s_, h in zip(sampled, hooks, strict=True)]
    q = statistics.quantiles(sampler_share, n=4)
    print(f"the sampler alone:      {statistics.median(sampler_share):+.2%} of the job's time "
          f"(quartiles {q[0]:+.2%} .. {q[2]:+.2%}), at any step length")
    for step_ms in (step_us / 1000, 1.0, 3.0, 10.0):
        hooks_share = statistics.median(hook_cost) / (step_ms * 1000)
        print(f"share of a {step_ms:.2f} ms step: hooks {hooks_share:.2%}, "
              f"armed memory {statistics.median(arm_cost) / (step_ms * 1000):.2%}, "
              f"hooks + sampler {hooks_share + statistics.median(sampler_share):.2%}")
    inside.close()
    outside.close()


if __name__ == "__main__":
    main()
