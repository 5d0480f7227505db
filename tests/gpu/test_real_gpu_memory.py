"""The oom playbook's CUDA paths on a real GPU: another process holding memory, the caching
allocator's pool, and a CUDA OOM with the allocator's snapshot. Skipped without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import run_fieldguide

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda")]


TRAINS_ON_CUDA = textwrap.dedent("""
    import time, torch
    m = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.Adam(m.parameters())
    end = time.time() + 60
    while time.time() < end:
        loss = m(torch.randn(512, 1024, device="cuda")).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
""")

HOLDS_A_SHARE = textwrap.dedent("""
    import sys, time, torch
    free, total = torch.cuda.mem_get_info()
    held = torch.empty(int(total * float(sys.argv[1])), dtype=torch.uint8, device="cuda")
    print("holding", held.numel(), flush=True)
    time.sleep(120)
""")

# Sizes that change every step: the cached blocks are split and left in pieces.
FRAGMENTS = textwrap.dedent("""
    import random, time, torch
    random.seed(0)
    m = torch.nn.Linear(256, 256).cuda(); opt = torch.optim.SGD(m.parameters(), lr=0.01)
    keep = []
    end = time.time() + 60
    while time.time() < end:
        n = random.randint(1, 64) * 4096
        x = torch.randn(n, 256, device="cuda")
        keep.append(torch.empty(random.randint(1, 512) * 1024, device="cuda"))
        keep = keep[-64:]
        loss = m(x).square().mean(); opt.zero_grad(); loss.backward(); opt.step()
""")

CUDA_OOM = textwrap.dedent("""
    import torch
    torch.cuda.set_per_process_memory_fraction(0.02)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU()).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        loss = m(torch.randn(batch, 3, 256, 256, device="cuda")).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
""")




def diagnose(tmp_path: Path, script_text: str, *options: str) -> dict:
    script = tmp_path / "job.py"
    script.write_text(script_text)
    report = tmp_path / "r.json"
    proc = run_fieldguide("diagnose", "--playbook", "oom", *options, "--report", str(report), "--",
                          sys.executable, str(script), timeout=150)
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(report.read_text())


def test_another_process_holding_a_third_of_the_gpu_is_named(tmp_path: Path) -> None:
    other = subprocess.Popen([sys.executable, "-c", HOLDS_A_SHARE, "0.35"], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and "holding" in other.stdout.readline()
        data = diagnose(tmp_path, TRAINS_ON_CUDA)
    finally:
        other.kill()
        other.wait()
    assert (data["first_departure"] or {}).get("cause") == "memory.other_process", data["path"]
    gpu = data["evidence"]["memory.other-process"]
    assert gpu["values"]["others_fraction_of_total"] >= 0.3
    assert str(other.pid) in gpu["values"]["others"]


def test_the_caching_allocators_pool_is_measured(tmp_path: Path) -> None:
    data = diagnose(tmp_path, FRAGMENTS)
    frag = next((p for p in data["path"] if p["node"] == "memory.fragmentation"), None)
    assert frag is not None, [(p["node"], p["status"], p.get("measured")) for p in data["path"]]
    assert frag["status"] in ("pass", "depart"), frag
    values = data["evidence"]["memory.fragmentation"]["values"]
    assert values["reserved_mb"] >= values["allocated_mb"] > 0


def test_a_cuda_oom_is_broken_down_with_the_allocators_snapshot(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    started = time.monotonic()
    data = diagnose(tmp_path, CUDA_OOM, "--memory-history")
    assert time.monotonic() - started < 120
    assert data["exit"]["exception"]["type"] == "OutOfMemoryError"
    assert (data["first_departure"] or {}).get("cause") == "memory.activations", data["path"]
    values = data["evidence"]["memory.tight"]["values"]
    assert values["limit"].startswith("GPU") and values["oom"] is True
    assert values.get("snapshot") and Path(values["snapshot"]).exists()
    snapshots = [a for a in data["artifacts"] if a["kind"] == "memory_snapshot"]
    assert snapshots and Path(snapshots[0]["path"]).is_file(), data["artifacts"]
