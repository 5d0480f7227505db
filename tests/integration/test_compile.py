"""The compile capability and the A/B runner on real jobs: the equivalence check leaves training
bit-identical, it tells a model that computes something else, and the runner's arms take turns.

The jobs here compile with `backend="eager"` (dynamo alone, well under a second) where inductor's
code is not what is tested; the zoo's compile workloads use inductor.
"""

from __future__ import annotations

import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fieldguide.experiments.experiment import ABExperiment
from fieldguide.targets import LaunchTarget

pytestmark = pytest.mark.integration

# BatchNorm (buffers a forward updates) and Dropout (the RNG): what the check must leave as it was.
LOSSES = textwrap.dedent("""
    import time, torch
    from torch import nn
    torch.manual_seed(0)
    torch.set_num_threads(1)
    net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    data = torch.randn(64, 16)
    for step in range(60):
        loss = model(data).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"loss {step} {loss.item()!r}", flush=True)
        time.sleep(0.05)
    print("running_mean", net[1].running_mean.sum().item().hex(), flush=True)
""")

# Reads a Python global in forward that changes: dynamo guards on it and recompiles, so the compiled
# model still computes what eager does (inductor's real differences are the zoo's mismatch workload).
FROZEN_GLOBAL = textwrap.dedent("""
    import time, torch
    from torch import nn
    SCALE = [1.0]
    class Net(nn.Module):
        def __init__(self):
            super().__init__(); self.lin = nn.Linear(8, 8)
        def forward(self, x):
            return self.lin(x) * SCALE[0]
    net = Net()
    model = torch.compile(net, backend="eager")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(400):
        loss = model(torch.randn(4, 8)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        SCALE[0] = 1.0 + step % 3
        time.sleep(0.02)
""")


def launch(tmp_path: Path, source: str, env: dict[str, str] | None = None) -> LaunchTarget:
    script = tmp_path / "job.py"
    script.write_text(source)
    return LaunchTarget([sys.executable, str(script)], env=env)


def run_to_end(target: LaunchTarget, check: bool) -> tuple[list[str], dict]:
    reply: dict = {}
    try:
        assert target.wait_ready(timeout=60, min_steps=3)
        if check:
            assert target.agent is not None
            answer = target.agent.request("compile", {"timeout_s": 20}, timeout=30, name="equivalence")
            assert answer.ok, answer.error
            reply = answer.result
        target.popen.wait(timeout=60)
        time.sleep(0.3)  # the output reader drains the pipe
    finally:
        target.close()
    return [line for line in target.log_tail(200) if line.startswith(("loss", "running_mean"))], reply


def test_the_equivalence_check_leaves_training_bit_identical(tmp_path: Path) -> None:
    # Both jobs at once (they mostly sleep): what they print depends on their seeds, not their timing.
    with_check, without = launch(tmp_path, LOSSES), launch(tmp_path, LOSSES)
    try:
        checked, reply = run_to_end(with_check, check=True)
    finally:
        plain, _ = run_to_end(without, check=False)
    assert reply["equivalent"] is True
    assert reply["random_modules"] == ["Dropout"]  # compared, but a walk would not judge it
    assert 3 <= reply["step"] < 60
    assert len(checked) == 61
    assert checked == plain  # same losses to the last bit, same BatchNorm running stats


def test_a_python_value_dynamo_guards_is_no_false_alarm(tmp_path: Path) -> None:
    target = launch(tmp_path, FROZEN_GLOBAL)
    try:
        assert target.wait_ready(timeout=60, min_steps=3)
        assert target.agent is not None
        answer = target.agent.request("compile", {"timeout_s": 20}, timeout=30, name="equivalence")
    finally:
        target.close()
    assert answer.ok, answer.error
    result = answer.result
    # Dynamo guards on the list's value and recompiles, so compiled and eager agree: no false alarm.
    assert result["equivalent"] is True, result
    assert result["outputs"][0]["dtype"] == "float32"


STEPS = textwrap.dedent("""
    import os, time, torch
    pause = 0.008 if os.environ.get("SLOWER") else 0.004
    w = torch.zeros(4, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        loss = (w - 1).square().sum()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(pause)
""")


@pytest.mark.alone
def test_the_ab_runner_times_both_arms_in_turns(tmp_path: Path) -> None:
    target = launch(tmp_path, STEPS)
    try:
        assert target.wait_ready(timeout=60, min_steps=3)
        experiment = ABExperiment(target, {"SLOWER": "1"}, "as launched", "slower")
        result = experiment.run(rounds=2, window_s=1.0, warmup_steps=3)
        assert target.alive(), "arm A is resumed after the experiment"
        assert experiment.relaunched_b is not None and not experiment.relaunched_b.alive(), "arm B is ended"
    finally:
        target.close()
    assert [t.arm for t in result.turns] == ["a", "b", "b", "a"]
    summary = result.summary()
    assert summary["rounds"] == 2 and summary["a_steps"] >= 20 and summary["b_steps"] >= 10
    # B sleeps twice as long per step: B's median over A's is about 2 in every round.
    assert 1.4 < summary["ratio_min"] <= summary["ratio_max"] < 2.8, summary
    # No step counted in a turn spans a pause: each began and ended inside its turn.
    for turn in result.turns:
        assert all(ms < 300 for ms in turn.step_ms), turn


def test_the_relaunch_leaves_out_what_fieldguide_added(tmp_path: Path) -> None:
    target = LaunchTarget([sys.executable, "-c", "import time; time.sleep(5)"], env={"PATH": "/usr/bin:/bin", "A": "1"},
                          extra_env={"TORCH_TRACE": str(tmp_path / "trace")})
    try:
        env = target.relaunch_env({"TORCH_COMPILE_DISABLE": "1"})
    finally:
        target.close()
    assert env["A"] == "1" and env["TORCH_COMPILE_DISABLE"] == "1"
    assert "TORCH_TRACE" not in env
    assert re.match(r"/", env["PATH"])
