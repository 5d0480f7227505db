"""Real-GPU efficiency: a launched float32 job with TF32 off on a GPU with tensor cores departs as
device.precision, and the same job with TF32 forced on (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1) does
not. Skipped cleanly without a CUDA GPU; scripts/gpu-check runs it and times both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

JOB = """
import time, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
end = time.time() + 90
while time.time() < end:
    loss = m(x).square().mean(); opt.zero_grad(); loss.backward(); opt.step()
    torch.cuda.synchronize()
"""


def walk(tmp_path: Path, env: dict[str, str]) -> dict:
    script = tmp_path / "fp32_job.py"
    script.write_text(JOB)
    report = tmp_path / f"report-{len(env)}.json"
    subprocess.run([sys.executable, "-m", "fieldguide", "diagnose", "--playbook", "slow-training", "--no-tui",
                    "--report", str(report), "--", sys.executable, str(script)],
                   env={**os.environ, **env}, capture_output=True, text=True, timeout=240)
    return json.loads(report.read_text())


def test_float32_without_tf32_is_named_and_tf32_on_is_not(cuda, tmp_path: Path) -> None:
    import torch

    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("no TF32 tensor cores before compute capability 8.0")
    off = walk(tmp_path, {})
    assert off["first_departure"] and off["first_departure"]["cause"] == "device.precision", off["path"][-3:]
    assert "float32 without TF32" in off["first_departure"]["summary"]
    on = walk(tmp_path, {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"})
    assert not on["first_departure"] or on["first_departure"]["cause"] != "device.precision", on["first_departure"]
