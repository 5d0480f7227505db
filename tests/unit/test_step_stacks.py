"""The training thread's samples over whole steps (launch mode), read as attach mode reads py-spy's:
a batch taken between the forward and the backward is input, a hand-written update in the loop's
own lines is not, and torch.save's timed share is the I/O the samples need not estimate."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.probes.loop import input_view, loop_values
from fieldguide.probes.stepstacks import io_outside_save, step_stacks

JOB = "/job/train.py"
MODULE = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
ROOT = [["<module>", JOB, 60], ["main", JOB, 40]]
FORWARD = [*ROOT, ["Module._wrapped_call_impl", MODULE, 1775], ["Module._call_impl", MODULE, 1786],
           ["Net.forward", JOB, 20]]
BACKWARD = [*ROOT, ["Tensor.backward", "/venv/lib/python3.12/site-packages/torch/_tensor.py", 625],
            ["backward", "/venv/lib/python3.12/site-packages/torch/autograd/__init__.py", 354],
            ["backward", "/venv/lib/python3.12/site-packages/fieldguide/agent/inside/capabilities/loop.py", 250]]
OPTIMIZER = [*ROOT, ["SGD.step", "/venv/lib/python3.12/site-packages/torch/optim/sgd.py", 120]]
GET_BATCH = [*ROOT, ["get_batch", JOB, 12]]
SAVE = [*ROOT, ["save", "/venv/lib/python3.12/site-packages/torch/serialization.py", 966]]
UPDATE = [["<module>", JOB, 60], ["main", JOB, 44]]  # `p -= lr * p.grad`, in the loop's own lines

SOURCE = {(JOB, 12): "time.sleep(0.004)", (JOB, 44): "p -= lr * p.grad"}


def source(file: str, line: int) -> str:
    return SOURCE.get((file, line), "")


def reply(*entries: tuple[list[list[Any]], int, int, int]) -> dict[str, Any]:
    """(stack, samples, on the CPU, in the input phase) per distinct stack."""
    return {"stacks": [[stack, n, cpu, phase] for stack, n, cpu, phase in entries],
            "samples": sum(e[1] for e in entries), "ticks": 120, "seconds": 2.4, "cpu_clock": True}


def rows(n: int = 20, wall: float = 0.05, save: float = 0.0) -> list[list[Any]]:
    """Steps ended by the optimizer, a forward each, no DataLoader."""
    return [[1000.0 + i * wall, wall, 0.0, "o", 0.001, 0.001, 0.0, 1, 0, 1, save, None] for i in range(n)]


def values(stacks_reply: dict[str, Any], step_rows: list[list[Any]] | None = None) -> tuple[dict, dict]:
    stacks = step_stacks(stacks_reply, 4242, source)
    return loop_values(step_rows or rows(), [], 0.0, 2000.0, 10, 3, input_view(stacks), stacks)


def test_a_batch_taken_between_the_forward_and_the_backward_is_input() -> None:
    """The prefetch pattern: the input phase (a step's end to the next forward) is empty, the
    wait is after the forward. Half the samples wait in get_batch, 2 of 50 on the CPU."""
    got, missing = values(reply((FORWARD, 20, 20, 0), (GET_BATCH, 50, 2, 0), (BACKWARD, 25, 25, 0),
                                (OPTIMIZER, 5, 5, 0)))
    assert got["data_wait_fraction"] == pytest.approx(0.5)
    assert got["input_from"] == "get_batch (train.py), in the loop"
    assert got["producer"] == "the training thread"
    assert got["producer_cpu_fraction"] == pytest.approx(0.04)
    assert "data_wait_fraction" not in missing


def test_a_hand_written_update_in_the_loop_is_not_input() -> None:
    """Everything from backward's end to the next forward is the input phase; an update written
    in the loop's own lines sits there, and once read as 45% waiting for data."""
    got, _ = values(reply((FORWARD, 30, 30, 0), (BACKWARD, 25, 25, 0), (UPDATE, 45, 45, 45)))
    assert got["data_wait_fraction"] == 0.0
    assert got["input_from"] == "no call for a batch seen in the loop"


def test_a_checkpoint_is_io_by_its_timed_share_and_not_counted_twice() -> None:
    """torch.save timed at 16% of each step; its samples (a few, by chance) are not added again."""
    r = reply((FORWARD, 40, 40, 0), (BACKWARD, 40, 40, 0), (SAVE, 6, 6, 6), (OPTIMIZER, 14, 14, 0))
    got, _ = values(r, rows(save=0.008))
    assert got["save_fraction"] == pytest.approx(0.16)
    assert got["io_fraction"] == pytest.approx(0.16)
    assert io_outside_save(step_stacks(r, 1, source)) == 0.0
    assert got["data_wait_fraction"] == 0.0  # a checkpoint is not input


def test_too_few_samples_fall_back_to_the_input_phase_and_agent_frames_are_dropped() -> None:
    few = reply((FORWARD, 5, 5, 0), (GET_BATCH, 5, 0, 0), (BACKWARD, 5, 5, 0))
    stacks = step_stacks(few, 1, source)
    assert not stacks.enough
    assert all("fieldguide/agent" not in f for s in stacks.all for _, f in s.stack)
    got, _ = values(few)
    assert got["input_from"] == "the time between a step and the next forward"


def test_without_a_cpu_clock_the_producer_is_not_guessed() -> None:
    r = dict(reply((FORWARD, 20, 0, 0), (GET_BATCH, 50, 0, 0), (BACKWARD, 30, 0, 0)), cpu_clock=False)
    got, missing = values(r)
    assert got["data_wait_fraction"] == pytest.approx(0.5)
    assert got["producer_cpu_fraction"] is None
    assert "no CPU clock" in missing["producer_cpu_fraction"]
