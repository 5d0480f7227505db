"""Launch mode reads a step's input and I/O as attach mode does: from the stack window's samples
of the training thread over whole steps (a batch taken between the forward and the backward is
input, a hand-written update in the loop's own lines is not), with the agent's exact timings
where it has them (torch.save), and its own input-phase samples only when there is no window."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.probes.input_stacks import input_stacks
from fieldguide.probes.loop import input_view, loop_values
from fieldguide.probes.stack_categories import ThreadSample
from fieldguide.probes.stacks import stack_values

JOB = "/job/train.py"
MODULE = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
AGENT = "/venv/lib/python3.12/site-packages/fieldguide/agent/inside/capabilities/loop.py"
ROOT = [("<module>", JOB), ("main", JOB)]
FORWARD = [*ROOT, ("Module._wrapped_call_impl", MODULE), ("Module._call_impl", MODULE), ("Net.forward", JOB)]
BACKWARD = [*ROOT, ("Tensor.backward", "/venv/lib/python3.12/site-packages/torch/_tensor.py"),
            ("backward", "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py")]
OPTIMIZER = [*ROOT, ("SGD.step", "/venv/lib/python3.12/site-packages/torch/optim/sgd.py")]
GET_BATCH = [*ROOT, ("get_batch", JOB)]
SAVE = [*ROOT, ("save", "/venv/lib/python3.12/site-packages/torch/serialization.py")]
UPDATE = ROOT  # `p -= lr * p.grad`, in the loop's own lines


def window(*entries: tuple[list[tuple[str, str]], int, int, str]) -> dict[str, Any]:
    """The stack window's values from (stack, samples, on the CPU, the leaf line's source)."""
    every, active = [], []
    for stack, n, cpu, source in entries:
        every.append(ThreadSample(pid=1, role="main", thread="MainThread", stack=stack, count=n,
                                  leaf_line=10, leaf_source=source))
        if cpu:
            active.append(ThreadSample(pid=1, role="main", thread="MainThread", stack=stack, count=cpu,
                                       leaf_line=10, leaf_source=source))
    values, _ = stack_values(every, active, device=False)
    return values


def rows(n: int = 20, wall: float = 0.05, save: float = 0.0, phase: float = 0.001) -> list[list[Any]]:
    """Steps ended by the optimizer, a forward each, no DataLoader."""
    return [[1000.0 + i * wall, wall, 0.0, "o", phase, phase, 0.0, 1, 0, 1, save, None] for i in range(n)]


def launched(step_rows: list[list[Any]], outside: dict[str, Any] | None, view: Any = None) -> tuple[dict, dict]:
    return loop_values(step_rows, [], 0.0, 2000.0, 10, 3, view, outside)


def test_a_batch_taken_between_the_forward_and_the_backward_is_input_in_both_modes() -> None:
    """The prefetch pattern: the input phase (a step's end to the next forward) is empty; the
    wait is after the forward. Half the samples wait in get_batch, 2 of 50 on the CPU."""
    outside = window((FORWARD, 20, 20, ""), (GET_BATCH, 50, 2, "time.sleep(0.004)"), (BACKWARD, 25, 25, ""),
                     (OPTIMIZER, 5, 5, ""))
    got, missing = launched(rows(), outside)
    assert got["data_wait_fraction"] == pytest.approx(outside["data_wait_fraction"]) == pytest.approx(0.5)
    assert got["input_from"] == outside["input_from"] == "get_batch (train.py), in the loop"
    assert got["producer_cpu_fraction"] == pytest.approx(0.04) and got["producer"] == "the training thread"
    assert "data_wait_fraction" not in missing


def test_a_hand_written_update_in_the_loops_own_lines_is_not_input() -> None:
    """From backward's end to the next forward is the input phase; an update written in the loop's
    own lines sits there, and once read as 45% waiting for data."""
    outside = window((FORWARD, 30, 30, ""), (BACKWARD, 25, 25, ""), (UPDATE, 45, 45, "p -= lr * p.grad"))
    got, _ = launched(rows(phase=0.0225), outside)
    assert got["data_wait_fraction"] == 0.0


def test_a_checkpoint_is_io_by_its_timed_share_and_its_samples_are_not_counted_twice() -> None:
    """torch.save timed at 16% of each step; the window saw it in 6% of samples (by chance), plus
    a log write in 5% more: 16% + 5%."""
    outside = window((FORWARD, 40, 40, ""), (BACKWARD, 35, 35, ""), (SAVE, 6, 6, ""),
                     ([*ROOT, ("log_metrics", JOB)], 5, 0, "f.write(line)"), (OPTIMIZER, 14, 14, ""))
    assert outside["torch_save_fraction"] == pytest.approx(0.06)
    got, _ = launched(rows(save=0.008), outside)
    assert got["save_fraction"] == pytest.approx(0.16)
    assert got["io_fraction"] == pytest.approx(0.16 + 0.05)
    assert got["io_at"] == outside["io_at"] == "main (train.py)"  # the job's frame that calls torch.save


def test_without_a_stack_window_the_input_phase_decides_and_its_samples_say_what_it_held() -> None:
    """The agent's own samples, taken in the phase: a checkpoint there is not input. Its wrapper
    frames are dropped; the job's frames stay."""
    wrapped_save = [*[[f, p, 10] for f, p in ROOT], ["LoopTiming.wrap_save.<locals>.save", AGENT, 270],
                    [SAVE[-1][0], SAVE[-1][1], 966]]  # torch.save through the agent's timing wrapper
    reply = {"stacks": [[wrapped_save, 8], [[[f, p, 12] for f, p in GET_BATCH], 2]], "in_phase": 10, "cuda": False}
    stacks = input_stacks(reply, 1, lambda file, line: "")
    assert all("fieldguide/agent" not in f for s in stacks.samples for _, f in s.stack)
    view = input_view(stacks)
    assert view.io_share == pytest.approx(0.8)
    got, missing = launched(rows(phase=0.01), None, view)
    assert got["input_from"] == "get_batch (train.py:12), between steps"
    assert got["data_wait_fraction"] == pytest.approx(0.2 * 0.2)  # the phase, less its I/O
    assert "no stack window" in missing["io_fraction"]
