"""The training thread's own stack samples (the agent's `input_stacks`), read the way py-spy's
samples are read from outside.

The agent samples the thread that trains, each sample marked in the input phase or not. The samples are taken with the GIL, so they land where the
thread lets it go: a tokenizer in pure Python that held it half the time showed in 10% of them
(a sleep in the rest). The whole-step decomposition is therefore py-spy's (which reads without
the GIL); these samples tell what the input phase holds (a checkpoint, a log write) when there
is no stack window. Pure functions over the reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.probes.stackclass import ThreadSample, classify_main, is_agent_file


@dataclass
class StepStacks:
    """The training thread's samples: all of them, and those taken in the input phase."""

    all: list[ThreadSample] = field(default_factory=list)
    in_phase: list[ThreadSample] = field(default_factory=list)
    samples: int = 0
    device: bool = True  # the job uses a GPU (CUDA initialised): it can wait for a device



def _frames(stack: list[list[Any]]) -> list[tuple[str, str]]:
    """(function, file), root first, without the agent's own wrappers (a hook around
    `backward` or `torch.save` is not the job's frame, and never shown as one)."""
    return [(str(func), str(file)) for func, file, _ in stack if not is_agent_file(str(file))]


def step_stacks(reply: dict[str, Any], pid: int, source: Callable[[str, int], str]) -> StepStacks:
    """ThreadSamples of the training thread from a `input_stacks` reply: all, and in the phase."""
    out = StepStacks(samples=int(reply.get("samples") or 0), device=bool(reply.get("cuda", True)))
    for entry in reply.get("stacks") or []:
        stack, n_all, n_phase = entry[0], int(entry[1]), int(entry[2])
        frames = _frames(stack)
        if not frames:
            continue
        leaf_file, leaf_line = str(stack[-1][1]), int(stack[-1][2])
        leaf_source = source(leaf_file, leaf_line) if not is_agent_file(leaf_file) else ""
        category = classify_main(frames, leaf_source, out.device)
        for into, count in ((out.all, n_all), (out.in_phase, n_phase)):
            if count:
                into.append(ThreadSample(pid=pid, role="main", thread="MainThread", stack=frames, count=count,
                                         category=category, leaf_line=leaf_line, leaf_source=leaf_source))
    return out

