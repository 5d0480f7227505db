"""The rows the agent streams, declared once: the agent writes them in this order, they travel as
JSON lists, and fieldguide reads them back by these names (`StepRow.read(row)`).

Standard library only: this module runs inside the job, and fieldguide imports it too.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypeVar

Row = TypeVar("Row", bound="tuple[Any, ...]")


def _read(cls: type[Row], row: Any) -> Row:
    """A row as received (a list, shorter if an older agent wrote it): missing trailing fields
    are None, extra ones (a newer agent's) are dropped."""
    width = len(cls._fields)  # type: ignore[attr-defined]
    values = list(row)[:width]
    return cls(*values, *([None] * (width - len(values))))


class StepRow(NamedTuple):
    """One training step, at its boundary (capabilities/loop.py)."""

    t_end: float  # monotonic time the step ended
    wall_s: float  # since the previous boundary
    loader_wait_s: float  # inside DataLoader.__next__
    boundary: str  # what ended it: "o" optimizer.step, "k" backward()
    input_s: float | None  # from the step's start to its first forward (None: no forward seen)
    input_cpu_s: float  # the training thread's CPU in that phase
    loader_cpu_s: float | None  # the training thread's CPU inside DataLoader.__next__
    backwards: int
    closures: int  # an LBFGS step's closure calls
    forwards: int  # outermost forward passes
    save_s: float  # inside torch.save
    batch_elements: int | None  # elements of the first forward's first tensor

    @classmethod
    def read(cls, row: Any) -> StepRow:
        return _read(cls, row)


class CollectiveRow(NamedTuple):
    """One step's time in torch.distributed, at its boundary (capabilities/collectives.py)."""

    t_end: float
    collective_s: float  # inside the job's own torch.distributed calls
    backward_wait_s: float  # off the CPU inside backward() (DDP's all-reduce, CPU tensors)
    backward_s: float
    calls: int

    @classmethod
    def read(cls, row: Any) -> CollectiveRow:
        return _read(cls, row)


class MemoryRow(NamedTuple):
    """Memory at one step boundary while a watch runs (capabilities/memory.py)."""

    step: int
    t: float
    rss: int | None  # bytes
    vms: int | None
    cuda_allocated: int | None
    cuda_reserved: int | None

    @classmethod
    def read(cls, row: Any) -> MemoryRow:
        return _read(cls, row)


class RssRow(NamedTuple):
    """The process's resident memory, sampled once a second by the agent's own thread."""

    t: float
    rss: int  # bytes
    step: int  # steps finished by then

    @classmethod
    def read(cls, row: Any) -> RssRow:
        return _read(cls, row)
