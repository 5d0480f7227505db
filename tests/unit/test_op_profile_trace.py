"""The op profile's trace is one HTA and TensorBoard read per step: a ProfilerStep#N marker for
each profiled step, the rank named, and the markers never counted as the job's ops. The job
sends the trace; fieldguide reads its numbers (and the job never imports inductor for it)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fieldguide.analysis.optrace import summarize_events, trace_events

torch = pytest.importorskip("torch")


class FakeAgent:
    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.listeners: list[Any] = []
        self.capabilities: dict[str, Any] = {}
        self.answered = threading.Event()

    def reply(self, request_id: Any, result: dict[str, Any]) -> None:
        self.replies.append(result)
        self.answered.set()

    def fail(self, request_id: Any, error: str) -> None:
        self.replies.append({"error": error})
        self.answered.set()

    def add_step_listener(self, capability: Any) -> None:
        self.listeners.append(capability)

    def remove_step_listener(self, capability: Any) -> None:
        self.listeners = [c for c in self.listeners if c is not capability]


def profile_steps(agent: FakeAgent, steps: int, run: int = 7) -> dict[str, Any]:
    """`run` steps of a linear model updated by hand (torch.optim's first use imports dynamo)."""
    from fieldguide.agent.inside.capabilities.opprofile import OpProfile

    capability = OpProfile(agent)  # type: ignore[arg-type]
    capability.start()
    capability.on_request("profile", 1, {"steps": steps})
    model = torch.nn.Linear(32, 32)
    for _ in range(run):
        model(torch.randn(8, 32)).sum().backward()
        with torch.no_grad():
            for param in model.parameters():
                param -= 0.1 * param.grad
        for listener in list(agent.listeners):
            listener.on_step()
        time.sleep(0.001)
    assert agent.answered.wait(30)
    [reply] = agent.replies
    return reply["profile"]  # type: ignore[no-any-return]


def test_each_profiled_step_is_marked_and_the_process_is_rank_0_of_1() -> None:
    sent = profile_steps(FakeAgent(), 4)
    assert sent["steps"] == 4 and sent["wall_s"] > 0
    trace = json.loads(sent["trace_json"])
    steps = sorted(e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{i}" for i in range(4)]
    assert trace["distributedInfo"]["rank"] == 0 and trace["distributedInfo"]["world_size"] == 1
    profile = summarize_events(trace_events(trace), sent["steps"], sent["wall_s"])
    assert all(not op["op"].startswith("ProfilerStep") for op in profile["top_ops"])
    assert {"aten::linear", "aten::sum"} <= {op["op"] for op in profile["top_ops"]}
    # linear's own addmm is inside it: counted once, as linear
    assert "aten::addmm" not in {op["op"] for op in profile["top_ops"]}
    assert 0 < profile["op_time_fraction"] <= 1.0 and profile["ops_per_step"] >= 3


def test_a_profile_does_not_import_inductor_into_a_job_that_never_compiles() -> None:
    # torch.profiler's own start asks hasattr(torch, "_inductor"): a second of imports on the
    # training thread of a job that has not imported it (no torch.optim, no compile). The agent's
    # profile must not.
    script = textwrap.dedent(f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent), *sys.path]!r}
        import torch
        from test_op_profile_trace import FakeAgent, profile_steps
        profile_steps(FakeAgent(), 2, run=4)
        print("inductor" if "torch._inductor" in sys.modules else "no inductor")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "no inductor"
