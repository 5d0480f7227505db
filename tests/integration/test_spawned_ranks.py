"""Ranks `torch.multiprocessing.spawn` started carry no rank in their environment: the attach side
reads each one's rank from its stack (`_wrap`'s `i`), and takes no other spawned process for one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fieldguide.host.access import py_spy_path
from fieldguide.host.kill import kill_tree
from fieldguide.host.rankfinder import sibling_ranks

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(py_spy_path() is None, reason="py-spy is not installed")]

SPAWNED = """
import os, sys, time
import torch.multiprocessing as mp

def work(i, world):
    # One write per line: print() under PYTHONUNBUFFERED writes the text and its newline apart,
    # and the two ranks' lines could interleave on the shared pipe.
    os.write(1, f"rank {i} pid {os.getpid()}\\n".encode())
    time.sleep(60)

if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
"""

# A process whose own spawned workers are no ranks (a DataLoader's with the spawn context, a pool).
POOL = """
import multiprocessing as mp, time

def idle(_):
    time.sleep(60)

if __name__ == "__main__":
    pool = mp.get_context("spawn").Pool(2)
    pool.map_async(idle, range(2))
    print("up", flush=True)
    time.sleep(60)
"""


def start(tmp_path: Path, source: str) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(source)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def stop(proc: subprocess.Popen[str]) -> None:
    kill_tree(proc)


def test_each_spawned_rank_is_read_from_its_stack(tmp_path: Path) -> None:
    proc = start(tmp_path, SPAWNED)
    try:
        assert proc.stdout is not None
        pids = {}
        for _ in range(2):
            _, rank, _, pid = proc.stdout.readline().split()
            pids[int(rank)] = int(pid)
        time.sleep(0.3)
        ranks = sibling_ranks(proc.pid)
        assert [(r["rank"], r["pid"], r["world_size"]) for r in ranks] == [(0, pids[0], 2), (1, pids[1], 2)]
        assert ranks[0]["identity"] == {"JOB_ID": f"mp.spawn:{proc.pid}"}
        assert [r["pid"] for r in sibling_ranks(pids[1])] == [pids[0], pids[1]]  # from a rank
    finally:
        stop(proc)


def test_a_pools_spawned_workers_are_no_ranks(tmp_path: Path) -> None:
    proc = start(tmp_path, POOL)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        time.sleep(0.5)
        assert sibling_ranks(proc.pid) == []
    finally:
        stop(proc)
