"""The training step's cycle from stack samples alone (attach mode): which samples are input.

Without a DataLoader there is no input frame to look for; the cycle is. The training
loop is the user function that calls the model (forward) and backward; a sample in that
loop that is inside another function of the job's own code, or a queue's get, while not
in forward, backward, the optimizer, writing or a device wait, is the loop fetching its next
batch: a generator, a `get_batch`, a queue fed by a thread. Reading and decoding there (a file,
a store, json.loads) is fetching too; writing is the loop's own I/O. On-CPU samples among them
tell producing from waiting. Pure functions over classified samples.
"""

from __future__ import annotations

import collections
import os
import re
import sys
from dataclasses import dataclass

from fieldguide.probes.loop_dataflow import LoopFlow
from fieldguide.probes.stack_categories import (
    BACKWARD,
    FORWARD,
    IO,
    LOCK_WAIT,
    OTHER,
    SLEEP,
    Frame,
    ThreadSample,
    is_io_read,
)

_LIBRARY = re.compile(r"(?:^|/)(?:torch|site-packages|dist-packages)/|/lib/python3[.\d]*/|^<")
_QUEUES = ("queue.py", "multiprocessing/queues.py")
# What fetching a batch can look like: waiting (sleep, a queue) or work in the job's own code.
INPUT_CATEGORIES = (SLEEP, LOCK_WAIT, OTHER)


def is_library(frame: Frame) -> bool:
    """torch's, an installed package's or the standard library's (by path, or a bare stdlib name)."""
    name = os.path.splitext(os.path.basename(frame[1]))[0]
    return bool(_LIBRARY.search(frame[1])) or name in sys.stdlib_module_names


def user_frame(stack: list[Frame], leaf_line: int | None = None) -> str | None:
    """The innermost frame of the job's own code (not torch's, an installed package's or the
    standard library's): "get_batch (train.py)", with the line when it is the innermost frame."""
    for depth, (func, file) in enumerate(reversed(stack)):
        if not _LIBRARY.search(file):
            line = f":{leaf_line}" if depth == 0 and leaf_line else ""
            return f"{func} ({os.path.basename(file)}{line})"
    return None


def loop_frame(samples: list[ThreadSample]) -> Frame | None:
    """The job's function that calls the model and backward: the user frame right above torch
    in forward and backward samples, the most common one."""
    seen: collections.Counter[Frame] = collections.Counter()
    for s in samples:
        if s.category not in (FORWARD, BACKWARD):
            continue
        for i, frame in enumerate(s.stack):
            if "torch/" in frame[1] and i > 0 and not is_library(s.stack[i - 1]):
                seen[s.stack[i - 1]] += s.count
                break
    return seen.most_common(1)[0][0] if seen else None


def loop_index(sample: ThreadSample, loop: Frame) -> int | None:
    """Where the loop's frame is in the sample's stack (its innermost call), or None."""
    if loop not in sample.stack:
        return None
    return len(sample.stack) - 1 - sample.stack[::-1].index(loop)


def frame_line(sample: ThreadSample, index: int) -> int | None:
    """The line the stack's frame at `index` stands on, where the sampler gave it."""
    lines = sample.lines
    return lines[index] if index < len(lines) else (sample.leaf_line if index == len(sample.stack) - 1 else None)


def input_call(sample: ThreadSample, loop: Frame, flow: LoopFlow | None = None) -> str | None:
    """The call the loop makes for its next batch in this sample ("get_batch (train.py:116)"), or None.
    With the loop's `flow`, a call whose result the step never reads is not input: it is the loop's
    own work beside the step (a metrics function, a callback)."""
    i = loop_index(sample, loop)
    if i is None:
        return None
    if sample.category not in INPUT_CATEGORIES and not (sample.category == IO
                                                        and is_io_read(sample.stack, sample.leaf_source)):
        return None
    if i + 1 >= len(sample.stack):
        return None  # in the loop's own line: its own work (a hand-written update, a print)
    callee = sample.stack[i + 1]
    if is_library(callee) and not any(q in callee[1] for q in _QUEUES):
        return None
    if flow is not None and flow.feeds(frame_line(sample, i)) is False:
        return None
    return f"{callee[0]} ({os.path.basename(callee[1])})"


@dataclass
class InputSamples:
    samples: int  # main-thread samples in all
    waiting_or_working: int  # samples fetching the next batch
    on_cpu: int  # of those, on the CPU (from the on-CPU sampler)
    io_reads: int  # of those, reading or decoding (classified I/O, counted as input instead)
    call: str | None  # the call that spends most of them
    loop: Frame  # the loop's own frame (input_call(sample, loop) says whether a sample fetches)


def input_samples(all_main: list[ThreadSample], active_main: list[ThreadSample],
                  flow: LoopFlow | None = None) -> InputSamples | None:
    """Input samples of a loop with no DataLoader; None when no training loop is seen."""
    loop = loop_frame(all_main)
    if loop is None:
        return None
    calls: collections.Counter[str] = collections.Counter()
    io_reads = 0
    for s in all_main:
        call = input_call(s, loop, flow)
        if call:
            calls[call] += s.count
            io_reads += s.count if s.category == IO else 0
    on_cpu = sum(s.count for s in active_main if input_call(s, loop, flow))
    return InputSamples(samples=sum(s.count for s in all_main), waiting_or_working=sum(calls.values()),
                        on_cpu=on_cpu, io_reads=io_reads, loop=loop, call=calls.most_common(1)[0][0] if calls else None)
