"""The job's first losses, for equivalence before speed: try-the-fix compares an arm's losses with
the job's over the same steps, so that a faster arm that computes something else is a regression.

The loss is what the job calls `.backward()` on (a one-element tensor); the first `LOSS_STEPS`
are kept as detached copies on their own device and read once, when the last one is in, so a
GPU job pays one synchronisation, not one a step. After that the wrapper only checks a flag.
`torch.manual_seed` is wrapped to note whether, and where, the job seeds torch's generator: two
runs of an unseeded job start from different weights and batches, and their losses say nothing
about a change between them.

Streams: `first` (floats, in order, once `LOSS_STEPS` are in or the job ends) and `seeded`
({"at": "file:line", "seed": n}, the job's first seeding).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

from ..callers import caller_line
from ..capability import Capability

LOSS_STEPS = 20


class Losses(Capability):
    name = "losses"
    streams = ("first", "seeded")

    def start(self) -> None:
        self.first = self.agent.stream(self.name, "first")
        self.seeded = self.agent.stream(self.name, "seeded")
        self.kept: list[Any] = []
        self.done = False
        self.seed_seen = False

    def hook_torch(self, torch: ModuleType) -> None:
        self.wrap_backward(torch)
        self.wrap_seed(torch)

    def wrap_backward(self, torch: ModuleType) -> None:
        base = torch.autograd.backward
        losses = self

        @functools.wraps(base)
        def backward(*args: Any, **kwargs: Any) -> Any:
            result = base(*args, **kwargs)
            if not losses.done:
                losses.keep(args[0] if args else kwargs.get("tensors"))
            return result

        torch.autograd.backward = backward

    def keep(self, tensor: Any) -> None:
        try:
            if isinstance(tensor, (tuple, list)):
                tensor = tensor[0] if len(tensor) == 1 else None
            if tensor is None or tensor.numel() != 1:
                return
            self.kept.append(tensor.detach().clone())
            if len(self.kept) >= LOSS_STEPS:
                self.send()
        except Exception:
            self.done = True  # a loss we cannot copy: no comparison, and no second try each step

    def send(self) -> None:
        if self.done:
            return
        self.done = True
        kept, self.kept = self.kept, []
        values = []
        for tensor in kept:
            try:
                values.append(float(tensor))
            except Exception:
                break
        self.first.extend(values)

    def wrap_seed(self, torch: ModuleType) -> None:
        base = torch.manual_seed
        losses = self

        @functools.wraps(base)
        def manual_seed(seed: Any) -> Any:
            # A DataLoader worker seeds itself from torch's own code: not the job's seeding.
            if not losses.seed_seen and os.getpid() == losses.agent.pid:
                try:
                    at = caller_line()
                    if at is not None:
                        losses.seed_seen = True
                        losses.seeded.append({"at": at, "seed": int(seed)})
                except Exception:
                    pass
            return base(seed)

        setattr(torch, "manual_seed", manual_seed)  # noqa: B010

    def on_exit(self) -> None:
        self.send()  # fewer steps than LOSS_STEPS: what there is


CAPABILITY = Losses
