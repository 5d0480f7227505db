"""The training thread's own stack samples over whole steps (the agent's `step_stacks`), read the
way py-spy's samples are read from outside.

The agent samples the thread that trains, not the input phase alone: a batch taken between
the forward and the backward (the prefetch pattern), a checkpoint written before the update,
a logging sink that blocks mid-step are all in the step. Each sample comes marked on the CPU or
not and in the input phase or not; the same classifier and the same step-cycle rules as attach
mode turn them into the step's decomposition, so the two modes cannot disagree on what a stack
means. Pure functions over the reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.probes.stackclass import IO, ThreadSample, classify_main, is_agent_file

# Fewer samples than this in a window say too little to decompose a step (at 50 Hz, 0.6 s).
MIN_STEP_SAMPLES = 30
_SAVE_FILE = "torch/serialization.py"


@dataclass
class StepStacks:
    """The training thread's samples, split as py-spy's two samplers split theirs."""

    all: list[ThreadSample] = field(default_factory=list)
    active: list[ThreadSample] = field(default_factory=list)
    in_phase: list[ThreadSample] = field(default_factory=list)
    samples: int = 0
    cpu_clock: bool = False

    @property
    def enough(self) -> bool:
        return self.samples >= MIN_STEP_SAMPLES


def _frames(stack: list[list[Any]]) -> list[tuple[str, str]]:
    """(function, file), root first, without the agent's own wrappers (a hook around
    `backward` or `torch.save` is not the job's frame, and never shown as one)."""
    return [(str(func), str(file)) for func, file, _ in stack if not is_agent_file(str(file))]


def step_stacks(reply: dict[str, Any], pid: int, source: Callable[[str, int], str]) -> StepStacks:
    """ThreadSamples of the training thread from a `step_stacks` reply: all, on-CPU and in-phase."""
    out = StepStacks(samples=int(reply.get("samples") or 0), cpu_clock=bool(reply.get("cpu_clock")))
    for entry in reply.get("stacks") or []:
        stack, n_all, n_cpu, n_phase = entry[0], int(entry[1]), int(entry[2]), int(entry[3])
        frames = _frames(stack)
        if not frames:
            continue
        leaf_file, leaf_line = str(stack[-1][1]), int(stack[-1][2])
        leaf_source = source(leaf_file, leaf_line) if not is_agent_file(leaf_file) else ""
        category = classify_main(frames, leaf_source)
        for into, count in ((out.all, n_all), (out.active, n_cpu), (out.in_phase, n_phase)):
            if count:
                into.append(ThreadSample(pid=pid, role="main", thread="MainThread", stack=frames, count=count,
                                         category=category, leaf_line=leaf_line, leaf_source=leaf_source))
    return out


def io_outside_save(stacks: StepStacks) -> float | None:
    """The share of samples in file/network I/O or serialization other than `torch.save`, whose
    time the agent measures exactly: what only the samples can estimate."""
    if not stacks.samples:
        return None
    counted = 0
    for s in stacks.all:
        if any(_SAVE_FILE in f for _, f in s.stack):
            continue
        if s.category == IO:
            counted += s.count
    return counted / stacks.samples

