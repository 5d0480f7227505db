"""The training thread's own stack samples in its input phase (the agent's `input_stacks`),
read the way py-spy's samples are read from outside.

The agent takes these with the GIL, so they land where the thread lets it go: a tokenizer in
pure Python that held it half the time showed in 10% of them (a sleep in the rest). The whole
step is therefore read from py-spy's window (which reads without the GIL); these samples say
what the input phase held (a checkpoint, a log write) when there is no window. Pure functions
over the reply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.probes.stack_categories import ThreadSample, classify_main, is_agent_file


@dataclass
class InputStacks:
    """The training thread's samples taken in its input phase, classified."""

    samples: list[ThreadSample] = field(default_factory=list)
    device: bool = True  # the job uses a GPU (CUDA initialised): it can wait for a device


def _frames(stack: list[list[Any]]) -> list[tuple[str, str]]:
    """(function, file), root first, without the agent's own wrappers (a hook around
    `backward` or `torch.save` is not the job's frame, and never shown as one)."""
    return [(str(func), str(file)) for func, file, _ in stack if not is_agent_file(str(file))]


def input_stacks(reply: dict[str, Any], pid: int, source: Callable[[str, int], str]) -> InputStacks:
    """Classified ThreadSamples of the training thread from an `input_stacks` reply."""
    out = InputStacks(device=bool(reply.get("cuda", True)))
    for stack, count in reply.get("stacks") or []:
        frames = _frames(stack)
        if not frames:
            continue
        leaf_file, leaf_line = str(stack[-1][1]), int(stack[-1][2])
        leaf_source = source(leaf_file, leaf_line) if not is_agent_file(leaf_file) else ""
        lines = [int(line) if line else None for _, file, line in stack if not is_agent_file(str(file))]
        out.samples.append(ThreadSample(pid=pid, role="main", thread="MainThread", stack=frames, count=int(count),
                                        category=classify_main(frames, leaf_source, out.device),
                                        leaf_line=leaf_line, leaf_source=leaf_source, lines=lines))
    return out
