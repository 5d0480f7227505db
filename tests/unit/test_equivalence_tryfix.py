"""Equivalence before speed in try-the-fix: the agent keeps a job's first losses and where it
seeds torch; an arm whose losses differ from the job's is a regression, never the arm that helps;
`precision.compute` turns the job's float64 into float32 without an edit to the script."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from fieldguide.agent.inside.capabilities.overrides import override_problems
from fieldguide.experiments.equivalence import compare_losses
from fieldguide.experiments.tryfix import plan, verdict
from fieldguide.playbook.causes import load_causes
from fieldguide.playbook.source import PlaybookError
from fieldguide.report.findings import EXPERIMENT_COLUMNS, experiment_rows

SEEDED = {"at": "train.py:3", "seed": 0}
JOB = {"first": [2.30, 2.25, 2.20, 2.14, 2.10, 2.05], "seeded": SEEDED}


def test_losses_within_the_tolerance_are_the_same_and_past_it_different() -> None:
    close = compare_losses(JOB, {"first": [v * (1 + 5e-5) for v in JOB["first"]]}, rtol=1e-3)
    assert close["equivalent"] is True and close["steps"] == 6 and close["max_rel"] == pytest.approx(5e-5)
    far = compare_losses(JOB, {"first": [*JOB["first"][:3], 2.5, 2.10, 2.05]}, rtol=1e-3)
    assert far["equivalent"] is False and far["at_step"] == 4 and "different losses" in far["text"]
    same = compare_losses(JOB, dict(JOB))
    assert same["equivalent"] is True and same["text"].startswith("identical losses over the first 6 steps")


def test_a_diverging_or_nan_arm_is_different_and_nan_in_both_is_not_a_difference() -> None:
    diverged = compare_losses(JOB, {"first": [2.30, 2.25, float("nan"), 2.14, 2.10, 2.05]})
    assert diverged["equivalent"] is False and "not finite" in diverged["text"]
    both = {"first": [2.30, float("nan"), 2.20, 2.14, 2.10], "seeded": SEEDED}
    assert compare_losses(both, {"first": list(both["first"])})["equivalent"] is True


def test_an_unseeded_job_or_too_few_steps_cannot_tell() -> None:
    unseeded = compare_losses({"first": JOB["first"], "seeded": None}, {"first": JOB["first"]})
    assert unseeded["equivalent"] is None and "does not seed" in unseeded["text"]
    short = compare_losses(JOB, {"first": JOB["first"][:3]})
    assert short["equivalent"] is None and "3 loss(es)" in short["text"]


def _row(arm: str, vs_a: float | None, low: float | None, high: float | None,
         losses: dict[str, Any] | None = None) -> dict[str, Any]:
    row = {"arm": arm, "vs_a": vs_a, "vs_a_min": low, "vs_a_max": high, "step_ms": 10.0, "step_ms_q1": 9.0,
           "step_ms_q3": 11.0, "steps": 40, "applied": []}
    if losses is not None:
        row["losses"] = losses
    return row


def test_a_faster_arm_that_computes_something_else_is_a_regression_not_a_win() -> None:
    base = _row("as launched", None, None, None)
    wrong = compare_losses(JOB, {"first": [v * 1.1 for v in JOB["first"]]})
    right = compare_losses(JOB, {"first": [v * (1 + 1e-6) for v in JOB["first"]]})
    text, _ = verdict([base, _row("compute=tf32", 0.3, 0.28, 0.33, wrong)], "precision.compute")
    assert text.startswith("a regression, not a win: compute=tf32 is faster") and "different losses" in text
    # The slower but equivalent arm is the one that helps, with its equivalence said.
    text, _ = verdict([base, _row("compute=tf32", 0.3, 0.28, 0.33, wrong),
                       _row("compute=float32", 0.6, 0.55, 0.66, right)], "precision.compute")
    assert text.startswith("compute=float32 helps") and "same losses over the first 6 steps" in text


def test_the_report_table_has_a_losses_column_per_arm() -> None:
    arms = [_row("as launched", None, None, None),
            _row("intra_op=2", 0.7, 0.66, 0.8, compare_losses(JOB, {"first": JOB["first"]})),
            _row("intra_op=4", 0.8, 0.7, 0.9, compare_losses({**JOB, "seeded": None}, JOB))]
    [(_, rows, _)] = experiment_rows([{"cause": "host.threads_limited", "ran": True, "rounds": 3, "arms": arms,
                                       "verdict": "v"}])
    at = EXPERIMENT_COLUMNS.index("losses")
    assert [row[at] for row in rows] == ["baseline", "identical", "cannot tell"]
    assert all(len(row) == len(EXPERIMENT_COLUMNS) for row in rows)


def test_the_precision_and_threads_experiments_compare_losses_and_tf32_is_tried_on_cuda_only() -> None:
    causes = load_causes(Path("playbooks"))
    precision, threads = causes["device.precision"], causes["host.threads_limited"]
    assert precision.experiment and precision.experiment["equivalence"] == {"rtol": 0.001}
    assert threads.experiment and "equivalence" in threads.experiment
    on_cpu, on_cuda = plan(precision, cuda=False), plan(precision, cuda=True)
    assert not isinstance(on_cpu, str) and not isinstance(on_cuda, str)
    assert [a.change["FIELDGUIDE_OVERRIDES"] for a in on_cpu] == ["precision.compute=float32"]
    assert [a.value for a in on_cuda] == ["float32", "tf32"]
    for arm in on_cuda:
        assert not override_problems(arm.change["FIELDGUIDE_OVERRIDES"])


@pytest.mark.parametrize("experiment", [
    "{override: threads.intra_op, values: [1], equivalence: {rtol: loose}}",
    "{override: threads.intra_op, values: [1], equivalence: {rtol: 5}}",
    "{override: threads.intra_op, values: [1], equivalence: {rtol: 0.01, steps: 1000000}}",
    "{override: threads.intra_op, values: [1], equivalence: 0.01}",
    "{env: {OMP_NUM_THREADS: 4}, cuda_values: [8]}",
])
def test_a_hostile_experiment_is_a_playbook_error(tmp_path: Path, experiment: str) -> None:
    (tmp_path / "causes.yaml").write_text(textwrap.dedent(f"""\
        x.bad:
          title: t
          summary: s
          why: w
          fix: [f]
          verify: v
          experiment: {experiment}
        """))
    with pytest.raises(PlaybookError):
        load_causes(tmp_path)


@pytest.mark.parametrize("text", ["precision.compute=float16", "precision.compute=tf32;rm -rf /",
                                  "precision.compute=", "precision.compute=TRUE"])
def test_precision_compute_takes_only_its_words(text: str) -> None:
    assert override_problems(text)


PRECISION_JOB = """
import json, sys
import torch
from fieldguide.agent.inside.precision import patch_precision
notes = []
patch_precision(torch, sys.argv[1], lambda what, where: notes.append([what, where]))
torch.set_default_dtype(torch.float64)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(4, 8)
for _ in range(3):
    out = model(x)
    out.sum().backward()
    opt.step()
class Pair(torch.nn.Module):  # float32 parameters, inputs given as a list
    def forward(self, pair):
        return pair[0] + pair[1]
both = Pair()([torch.ones(2), torch.ones(2)])
print(json.dumps({"dtypes": [str(t.dtype) for t in (model[0].weight, out, opt.state[model[0].weight]["exp_avg"], both)],
                  "kept": opt.param_groups[0]["params"][0] is model[0].weight, "x": str(x.dtype),
                  "notes": notes,
                  "precision": torch.get_float32_matmul_precision()}))
"""


@pytest.mark.parametrize("mode", ["float32", "tf32"])
def test_precision_compute_makes_the_modules_float32_at_their_call(tmp_path: Path, mode: str) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "job.py"
    script.write_text(PRECISION_JOB)
    # Its own interpreter: the override installs a global module hook for the rest of the process.
    run = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    # The module computes in float32, the optimizer's Parameter objects are the module's own, and
    # its state is float32; the job's tensors are created as the job made them (the same draws).
    assert set(found["dtypes"]) == {"torch.float32"} and found["kept"] and found["x"] == "torch.float64"
    notes = [n for n in found["notes"] if n[1] != "import torch"]
    assert notes == [["Linear: float64 parameters -> float32", f"job.py:{PRECISION_JOB.splitlines().index('    out = model(x)') + 1}"]]
    assert found["precision"] == ("high" if mode == "tf32" else "highest")


class StreamAgent:
    def __init__(self) -> None:
        import collections
        import os

        self.pid = os.getpid()
        self.streams: dict[str, Any] = {}
        self.deque = collections.deque

    def stream(self, capability: str, name: str) -> Any:
        return self.streams.setdefault(name, self.deque())


@pytest.fixture
def hooked(monkeypatch) -> tuple[Any, StreamAgent]:
    """The losses capability hooked into this process's torch, as a launched job's agent does;
    torch's functions are put back after the test."""
    torch = pytest.importorskip("torch")
    from fieldguide.agent.inside.capabilities import losses

    monkeypatch.setattr(torch.autograd, "backward", torch.autograd.backward)
    monkeypatch.setattr(torch, "manual_seed", torch.manual_seed)
    agent = StreamAgent()
    capability = losses.Losses(agent)  # type: ignore[arg-type]
    capability.start()
    capability.hook_torch(torch)
    return capability, agent


def test_the_agent_keeps_the_first_losses_and_where_the_job_seeded(hooked: tuple[Any, StreamAgent]) -> None:
    import torch

    from fieldguide.agent.inside.capabilities import losses

    _, agent = hooked
    torch.manual_seed(3)
    torch.manual_seed(4)  # the first seeding is the one noted
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for step in range(losses.LOSS_STEPS + 5):
        loss = model(torch.randn(8, 4)).pow(2).mean()
        seen.append(float(loss.detach()))
        if step == 2:
            model(torch.randn(8, 4)).sum(dim=1).backward(torch.ones(8))  # not a loss: not kept
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step < losses.LOSS_STEPS - 1:
            assert not agent.streams["first"]  # read once, when all are in
    assert list(agent.streams["first"]) == pytest.approx(seen[:losses.LOSS_STEPS])
    [seeded] = agent.streams["seeded"]
    assert seeded["seed"] == 3 and "test_equivalence_tryfix.py:" in seeded["at"]


def test_a_job_that_ends_early_sends_the_losses_it_has(hooked: tuple[Any, StreamAgent]) -> None:
    import torch

    capability, agent = hooked
    w = torch.ones(2, requires_grad=True)
    for _ in range(3):
        (w * 2).sum().backward()
    capability.on_exit()
    assert list(agent.streams["first"]) == [4.0, 4.0, 4.0] and not agent.streams["seeded"]
