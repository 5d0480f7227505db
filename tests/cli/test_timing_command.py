"""`fieldguide timing -- CMD` on a real zoo workload (CPU here: no device queue), and bad input."""

from __future__ import annotations

import re
import sys

import pytest

from tests.cli.test_bad_input import assert_one_line_error
from tests.conftest import run_fieldguide

pytestmark = pytest.mark.integration

LABELS = ("first step ever", "naive timer, first 20 steps", "naive timer, first 100 steps",
          "naive timer, first 400 steps", "still queued at the final sync", "synchronized warmed median")


def test_timing_table_on_a_cpu_workload() -> None:
    from fieldguide import workloads

    proc = run_fieldguide("timing", "--steps", "100", "--timeout", "60", "--", sys.executable,
                          str(workloads.path("healthy_mlp")), env={"FIELDGUIDE_WORKLOAD_SECONDS": "30"}, timeout=90)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    found = {label: line for line in out.splitlines() for label in LABELS if line.strip().startswith(label)}
    assert set(found) == set(LABELS), out
    assert re.search(r"first step ever +[\d.]+ ms +[\d.]+x a warm step", found["first step ever"]), out
    for n in (20, 100):
        assert re.search(r"[\d.]+ ms/step +[\d.]+x warm", found[f"naive timer, first {n} steps"]), out
    assert "not timed: --steps 100" in found["naive timer, first 400 steps"]
    assert re.search(r"0 ms +no device queue \(CPU\)", found["still queued at the final sync"]), out
    assert re.search(r"[\d.]+ ms/step +p10-p90 [\d.]+-[\d.]+, host", found["synchronized warmed median"]), out
    flat = " ".join(out.split())
    assert "No device queue: the job has not initialised CUDA" in flat
    assert "so host time is the real time" in flat
    assert re.search(r"Reading: the naive 20-step timer reads .*; over 100 steps it reads [\d.]+x; on CPU", flat)
    assert max(len(line) for line in out.splitlines()) <= 80  # COLUMNS=120, the table keeps to 80


def test_a_command_that_is_not_there_is_one_line() -> None:
    proc = run_fieldguide("timing", "--steps", "20", "--", "no-such-command-xyz", timeout=30)
    assert_one_line_error(proc, 3, "command not found: no-such-command-xyz")


def test_too_few_steps_is_bad_input() -> None:
    proc = run_fieldguide("timing", "--steps", "1", "--", sys.executable, "-c", "pass", timeout=30)
    assert_one_line_error(proc, 2, "--steps must be at least 2")
