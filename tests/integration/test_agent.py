"""The in-process agent in a real launched job: it sees steps, and the job runs as without it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from fieldguide.targets import LaunchTarget

pytestmark = pytest.mark.integration

JOB = textwrap.dedent("""
    import importlib.util, os, sys, time
    # Libraries probe for torch before importing it; the agent must still hook the real import.
    assert importlib.util.find_spec("torch") is not None
    import torch
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    end = time.monotonic() + float(sys.argv[1])
    steps = 0
    while time.monotonic() < end:
        loss = model(torch.randn(4, 8)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        steps += 1
    from torch.nn.modules import module
    hooks = len(module._global_forward_pre_hooks) + len(module._global_forward_hooks)
    print("done", steps, "sitecustomize" in sys.modules, "global hooks", hooks, flush=True)
    sys.exit(7)
""")


def test_agent_hooks_torch_after_a_find_spec_probe_and_keeps_the_jobs_behaviour(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    target = LaunchTarget([sys.executable, str(script), "3"])
    try:
        target.wait_ready(timeout=30)
        conn = target.agent.primary()
        assert conn is not None and conn.steps_total >= 3
        assert conn.torch.get("torch")
        reply = target.agent.request("torchstate", timeout=10)
        assert reply.ok and reply.result["state"]["anomaly_detection"] is False
        assert target.popen.wait(timeout=30) == 7  # its own exit status
    finally:
        target.close()
    done = [line for line in target.log_tail() if line.startswith("done ")]  # its output is kept
    # Once the outermost module is known, no hook runs on every module call: the optimizer's
    # first step imports torch._dynamo, which is no sign that the job compiles.
    assert done and done[0].endswith("global hooks 0"), done
    assert not Path(target._dir).exists()  # the private directory is gone


RAISES_IN_STEP_3 = textwrap.dedent("""
    import torch
    # Steps of a few ms over one fixed batch: with 3 steps to judge, the input phase is the loop's own
    # few microseconds (a fresh torch.randn per step would be a real 20% of a 0.2 ms step).
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = torch.randn(256, 256)
    for step in range(100):
        loss = model(batch).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        if step == 2:
            raise ValueError("bad batch in step 3")
""")


def test_a_job_that_raises_in_its_third_step_is_judged_on_what_it_left(tmp_path: Path) -> None:
    import json
    import subprocess

    script = tmp_path / "raises.py"
    script.write_text(RAISES_IN_STEP_3)
    report = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "fieldguide", "diagnose", "--playbook", "slow-training",
                           "--report", str(report), "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr
    data = json.loads(report.read_text())
    assert proc.returncode != 3, data
    assert data["exit"]["code"] == 1
    assert data["exit"]["exception"]["type"] == "ValueError"
    assert data["exit"]["exception"]["message"] == "bad batch in step 3"
    assert data["exit"]["exception"]["where"].startswith("raises.py:")
    # What it left was judged: its debug switches (the snapshot at its first step) and its steps.
    judged = {p["node"]: p["status"] for p in data["path"]}
    assert judged["env.debug-flags"] == "pass" and judged["input.data-wait"] == "pass"
    assert "ValueError: bad batch in step 3" in data["note"]


STUBBORN = textwrap.dedent("""
    import signal, time, torch
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only SIGTERM (after 3 s) or SIGKILL end it
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    while True:
        loss = model(torch.randn(4, 8)).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.01)
""")


def test_a_second_sigterm_while_the_job_is_being_ended_does_not_cut_the_ending_short(tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess
    import time

    import psutil

    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    report = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "fieldguide", "diagnose", "--playbook", "slow-training",
                             "--report", str(report), "--", sys.executable, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, NO_COLOR="1"))
    deadline = time.monotonic() + 40
    job: list[psutil.Process] = []
    while time.monotonic() < deadline and not job:
        job = [c for c in psutil.Process(proc.pid).children(recursive=True) if "stubborn" in " ".join(c.cmdline())]
        time.sleep(0.2)
    assert job, "the job did not start"
    time.sleep(4)
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)  # fieldguide is now ending the job: SIGINT (ignored), then SIGTERM after 3 s
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert json.loads(report.read_text())["verdict"] == "inconclusive"
    assert not psutil.wait_procs(job, timeout=5)[1], "the job was left running"


EVAL_THEN_TRAIN = textwrap.dedent("""
    import time, torch
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.LSTMCell(8, 16)
            self.head = torch.nn.Linear(16, 2)
        def forward(self, x):
            h = c = torch.zeros(x.shape[1], 16)
            for t in range(x.shape[0]):  # a module call per timestep, one forward pass
                h, c = self.cell(x[t], (h, c))
            return self.head(h)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(30, 4, 8)
    with torch.no_grad():  # an evaluation before training, as nanoGPT's at iteration 0
        for _ in range(250):
            model(x)
    print("eval done", flush=True)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
""")


def test_forward_passes_not_module_calls_and_an_evaluation_before_training_is_waited_for(tmp_path: Path) -> None:
    """250 evaluation passes of a model whose forward steps an LSTMCell 30 times (7,750 module
    calls): the agent counts 200 passes, hooks the model itself, and the job then trains with
    each step's input phase ending at its forward."""
    script = tmp_path / "job.py"
    script.write_text(EVAL_THEN_TRAIN)
    target = LaunchTarget([sys.executable, str(script)])
    try:
        assert target.wait_ready(timeout=60, min_steps=5)
        conn = target.agent.primary()
        assert conn is not None
        signals = list(conn.stream("loop", "signals").items)
        found = next(s for s in signals if "outer_modules" in s)
        assert found["outer_modules"] == ["Net"] and found["forwards_before_training"] == 200
        assert any("first_backward" in s for s in signals)
        rows = list(conn.steps)
        assert rows and all(r[9] == 1 for r in rows[1:]), rows[:5]  # one forward ends each step's input phase
    finally:
        target.close()
