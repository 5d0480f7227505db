"""The op profile's trace is one HTA and TensorBoard read per step: a ProfilerStep#N marker for
each profiled step, the rank named, and the markers never counted as the job's ops."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

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


def test_each_profiled_step_is_marked_and_the_process_is_rank_0_of_1(tmp_path: Path) -> None:
    from fieldguide.agent.inside.capabilities.opprofile import OpProfile

    agent = FakeAgent()
    capability = OpProfile(agent)  # type: ignore[arg-type]
    capability.start()
    trace = tmp_path / "t.pt.trace.json"
    capability.on_request("profile", 1, {"steps": 4, "trace": str(trace)})
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(7):
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        for listener in list(agent.listeners):
            listener.on_step()
        time.sleep(0.001)
    assert agent.answered.wait(30)
    [reply] = agent.replies
    profile = reply["profile"]
    assert profile["steps"] == 4 and profile["trace"] == str(trace)
    events = json.loads(trace.read_text())
    steps = sorted(e["name"] for e in events["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == [f"ProfilerStep#{i}" for i in range(4)]
    assert events["distributedInfo"]["rank"] == 0
    assert all(not op["op"].startswith("ProfilerStep") for op in profile["top_ops"])
    assert {"aten::linear", "aten::sum"} <= {op["op"] for op in profile["top_ops"]}
