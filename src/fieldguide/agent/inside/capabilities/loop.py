"""Loop timing: where each training step ends, and how long it waited for its batch.

Hooks (when torch is imported):
- `register_optimizer_step_post_hook`: a step ends when the first optimizer that
  ever stepped steps again (not patching Optimizer.step: subclasses override it);
- `_BaseDataLoaderIter.__next__` (the only __next__) and `DataLoader.__iter__`:
  time waiting for each batch, and each iterator's time to its first batch.
Streams `steps` rows [t_end, wall_s, data_wait_s, boundary] and `iters` (one dict
per DataLoader iterator, at its first batch).
"""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

from ..capability import Capability

BY_OPTIMIZER, BY_BATCH = "o", "b"


class LoopTiming(Capability):
    name = "loop"
    streams = ("steps", "iters")

    def start(self) -> None:
        self.steps = self.agent.stream(self.name, "steps")
        self.iters = self.agent.stream(self.name, "iters")
        self.last_boundary: float | None = None
        self.wait_acc = 0.0
        self.primary_optimizer: int | None = None

    def hook_torch(self, torch: ModuleType) -> None:
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(self.on_optimizer_step)
        except Exception as err:
            self.agent.hook_failed(self.name, "optimizer step post-hook", err)
        try:
            self.patch_dataloader()
        except Exception as err:
            self.agent.hook_failed(self.name, "DataLoader __next__/__iter__", err)

    # -- on the training thread: as little as possible ----------------------------------
    def boundary(self, kind: str) -> None:
        agent = self.agent
        if agent.disabled:
            return
        now = time.monotonic()
        if self.last_boundary is not None:
            self.steps.append([round(now, 6), round(now - self.last_boundary, 6), round(self.wait_acc, 6), kind])
        self.last_boundary = now
        self.wait_acc = 0.0
        agent.boundary()

    def on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            if self.primary_optimizer is None:
                self.primary_optimizer = id(optimizer)
                self.last_boundary = None  # switch from batch boundaries to optimizer steps
            if id(optimizer) == self.primary_optimizer:
                self.boundary(BY_OPTIMIZER)
        except Exception:
            pass

    def patch_dataloader(self) -> None:
        from torch.utils.data import dataloader

        loop = self
        base_next = dataloader._BaseDataLoaderIter.__next__
        base_iter = dataloader.DataLoader.__iter__

        def __next__(it: Any) -> Any:
            t0 = time.monotonic()
            try:
                return base_next(it)
            finally:
                try:
                    t1 = time.monotonic()
                    loop.wait_acc += t1 - t0
                    if it._fieldguide_first:
                        it._fieldguide_first = False
                        loop.iters.append({
                            "t_start": round(it._fieldguide_t0, 6),
                            "first_batch_s": round(t1 - it._fieldguide_t0, 6),
                            "num_workers": it._fieldguide_workers,
                            "persistent_workers": it._fieldguide_persistent,
                            "iterator": type(it).__name__,
                        })
                    if loop.primary_optimizer is None:
                        loop.boundary(BY_BATCH)
                except Exception:
                    pass

        def __iter__(loader: Any) -> Any:
            t0 = time.monotonic()
            it = base_iter(loader)
            try:
                loop.wait_acc += time.monotonic() - t0
                it._fieldguide_t0 = t0
                it._fieldguide_first = True
                it._fieldguide_workers = getattr(loader, "num_workers", 0)
                it._fieldguide_persistent = bool(getattr(loader, "persistent_workers", False))
            except Exception:
                pass
            return it

        __next__.__wrapped__ = base_next  # type: ignore[attr-defined]
        __iter__.__wrapped__ = base_iter  # type: ignore[attr-defined]
        # An iterator made before the patch lacks our attributes: default them on the class.
        dataloader._BaseDataLoaderIter._fieldguide_first = False
        dataloader._BaseDataLoaderIter.__next__ = __next__
        dataloader.DataLoader.__iter__ = __iter__


CAPABILITY = LoopTiming
