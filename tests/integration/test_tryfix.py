"""Trying a fix on real jobs: the agent applies FIELDGUIDE_OVERRIDES with no edit to the script,
and `--try-fix` relaunches a job that waits for its data with more workers and says it scales."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fieldguide.targets import LaunchTarget
from tests.conftest import run_fieldguide

pytestmark = pytest.mark.integration

# A loader whose samples wait on a (simulated) store: 3 ms each, 16 a batch, no workers.
WAITS_FOR_SAMPLES = textwrap.dedent("""
    import os, time, torch
    from torch.utils.data import DataLoader, Dataset
    class Store(Dataset):
        def __len__(self): return 10**6
        def __getitem__(self, i):
            time.sleep(0.003)
            return torch.randn(32), i % 4
    torch.autograd.set_detect_anomaly(True)  # left on from a debugging session
    model = torch.nn.Linear(32, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Store(), batch_size=16, num_workers=0)
    print("workers", loader.num_workers, "anomaly", torch.is_anomaly_enabled(), flush=True)
    end = time.monotonic() + float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "60"))
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if time.monotonic() > end:
            break
""")


def test_the_agent_applies_overrides_and_says_where(tmp_path: Path) -> None:
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_SAMPLES)
    import os

    env = dict(os.environ, FIELDGUIDE_OVERRIDES="dataloader.num_workers=2,debug.anomaly=false")
    target = LaunchTarget([sys.executable, str(script)], env=env)
    try:
        assert target.wait_ready(timeout=60, min_steps=3)
        time.sleep(0.5)
        conn = target.agent.primary() if target.agent else None
        assert conn is not None
        applied = {(a["name"], a["value"]) for a in conn.stream("overrides", "applied").items}
        wheres = {a["where"] for a in conn.stream("overrides", "applied").items}
    finally:
        target.close()
    assert applied == {("dataloader.num_workers", 2), ("debug.anomaly", False)}
    assert "waits.py:12" in wheres  # the DataLoader(...) line of the job
    assert "workers 2 anomaly False" in target.log_tail(50)


@pytest.mark.alone
@pytest.mark.slow
def test_try_fix_relaunches_a_waiting_loader_with_more_workers_and_it_scales(tmp_path: Path) -> None:
    script = tmp_path / "waits.py"
    script.write_text(WAITS_FOR_SAMPLES.replace("torch.autograd.set_detect_anomaly(True)", "pass"))
    report = tmp_path / "r.json"
    proc = run_fieldguide("diagnose", "--playbook", "slow-training", "--try-fix", "--report", str(report), "--",
                          sys.executable, str(script), timeout=300, env={"FIELDGUIDE_WORKLOAD_SECONDS": "240"})
    data = json.loads(report.read_text())
    assert data["first_departure"]["cause"] == "input.waiting", proc.stderr
    experiment = data["experiments"][0]
    assert experiment["ran"] and experiment["shape"] == "scales with workers", experiment
    by_arm = {a["arm"]: a for a in experiment["arms"]}
    assert by_arm["num_workers=8"]["step_ms"] < by_arm["num_workers=1"]["step_ms"] / 3
    assert "helps" in experiment["verdict"]


# A seeded job that trains in float64 by one call: set_default_dtype, as copied from a notebook.
FLOAT64_JOB = textwrap.dedent("""
    import os, time, torch
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(2048, 256), torch.randint(0, 10, (2048,))
    end = time.monotonic() + float(os.environ.get("FIELDGUIDE_WORKLOAD_SECONDS", "60"))
    step = 0
    while time.monotonic() < end:
        i = (step * 64) % 1984
        loss = torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64])
        opt.zero_grad(); loss.backward(); opt.step()
        step += 1
""")


def test_a_fix_that_changes_the_dtype_is_timed_only_with_its_losses_compared(tmp_path: Path) -> None:
    from fieldguide.experiments.tryfix import try_fix
    from fieldguide.playbook.causes import load_causes

    script = tmp_path / "f64.py"
    script.write_text(FLOAT64_JOB)
    cause = load_causes(Path("playbooks"))["device.precision"]
    target = LaunchTarget([sys.executable, str(script)])
    try:
        assert target.wait_ready(timeout=60, min_steps=25)
        result = try_fix(target, cause, rounds=2, window_s=1.0)
    finally:
        target.close()
    assert result["ran"], result
    job, arm = result["arms"]
    assert arm["arm"] == "compute=float32" and arm["applied"] == [
        "compute=Linear: float64 parameters -> float32 at f64.py:12"]
    # float32 reproduces float64's losses over the first 20 steps to float32's precision.
    assert arm["losses"]["equivalent"] is True and arm["losses"]["steps"] == 20, arm["losses"]
    assert 0 < arm["losses"]["max_rel"] < 1e-4
    assert "losses over the first 20 steps" in result["verdict"]
