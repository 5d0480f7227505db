"""The step budget on constructed samples and source: every share named, the loop's own work by its
line, what feeds the step told from what does not; and the walk that names the largest share first."""

from __future__ import annotations

import textwrap

import pytest
from fg_fakes import LAUNCH, FakeMeasure, healthy_values

from fieldguide.playbook import find_playbook
from fieldguide.probes import stack_categories as sc
from fieldguide.probes.loop_dataflow import is_update_function, loop_flow
from fieldguide.probes.stacks import framework_frame
from fieldguide.probes.step_budget import (
    BudgetLine,
    flow_of,
    part_share,
    refine,
    sample_budget,
    sample_part,
    update_call_lines,
)
from fieldguide.probes.step_cycle import input_call, loop_frame
from fieldguide.report import to_markdown
from fieldguide.report.findings import Findings, findings_from_walk
from fieldguide.walk.engine import DEPARTURE, Walk

TRAIN = textwrap.dedent("""\
    import gc, torch

    def get_batch(i):
        return torch.randn(8, 4), torch.randint(0, 2, (8,))

    def weight_health(w):
        vals = w.tolist()
        return sum(vals) / len(vals)

    def sgd(params, lr):
        for p in params:
            p.data -= lr * p.grad

    def grad_norm(params):
        return sum(p.grad.norm() for p in params)

    def main(model, opt, loss_fn):
        step = 0
        while True:
            xb, yb = get_batch(step)
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            health = weight_health(model.weight)
            gc.collect()
            torch.save(model.state_dict(), "ckpt.pt")
            if step % 50 == 0:
                print(step, health)
            step += 1
""")
LINES = TRAIN.splitlines()
FILE = "/job/train.py"
MODULE = "/site-packages/torch/nn/modules/module.py"


def line_of(text: str) -> int:
    return next(i + 1 for i, line in enumerate(LINES) if text in line)


def sample(category: str, frames: list[tuple[str, str, int]], count: int, leaf_source: str = "") -> sc.ThreadSample:
    """A classified main-thread sample: frames root first as (function, file, line)."""
    stack = [(f, file) for f, file, _ in frames]
    lines: list[int | None] = [line for _, _, line in frames]
    return sc.ThreadSample(pid=1, role="main", thread="MainThread", stack=stack, count=count, category=category,
                           leaf_line=lines[-1], leaf_source=leaf_source, lines=lines)


def loop_at(text: str) -> tuple[str, str, int]:
    return ("main", FILE, line_of(text))


def job_samples() -> list[sc.ThreadSample]:
    return [
        sample(sc.FORWARD, [loop_at("loss = loss_fn(model(xb)"), ("Module._call_impl", MODULE, 1)], 30),
        sample(sc.BACKWARD, [loop_at("loss.backward()"), ("Tensor.backward", "/site-packages/torch/_tensor.py", 1)],
               30),
        sample(sc.OPTIMIZER, [loop_at("opt.step()"), ("SGD.step", "/site-packages/torch/optim/sgd.py", 1)], 10),
        # The loop's call for its batch: its result feeds the forward.
        sample(sc.OTHER, [loop_at("xb, yb = get_batch(step)"), ("get_batch", FILE, line_of("return torch.randn"))], 10),
        # Metrics beside the step: nothing the step reads comes from them.
        sample(sc.OTHER, [loop_at("health = weight_health("), ("weight_health", FILE, line_of("vals = w.tolist()"))],
               12, "vals = w.tolist()"),
        sample(sc.OTHER, [loop_at("health = weight_health("), ("weight_health", FILE, line_of("return sum(vals)"))], 4),
        sample(sc.OTHER, [loop_at("gc.collect()")], 8, "gc.collect()"),
        sample(sc.IO, [loop_at("torch.save("), ("save", "/site-packages/torch/serialization.py", 1)], 6),
    ]


def place_of(samples: list[sc.ThreadSample]):  # type: ignore[no-untyped-def]
    loop = loop_frame(samples)
    flow = flow_of(samples, loop, lambda file: TRAIN if file == FILE else None)

    def place(s: sc.ThreadSample):  # type: ignore[no-untyped-def]
        return sample_part(s, loop, flow, lambda x: input_call(x, loop, flow) is not None, framework_frame,
                           lambda file, func, line: file == FILE and is_update_function(TRAIN, func, line))
    return loop, flow, place


def test_the_loops_flow_tells_what_feeds_the_step_from_what_does_not() -> None:
    sinks = {line_of("loss = loss_fn"), line_of("loss.backward()"), line_of("opt.step()")}
    flow = loop_flow(TRAIN, "main", min(sinks), sinks)
    assert flow is not None
    assert flow.feeds(line_of("xb, yb = get_batch(step)")) is True
    assert flow.feeds(line_of("opt.zero_grad()")) is True  # changes the optimizer the step uses
    assert flow.feeds(line_of("health = weight_health(")) is False
    assert flow.feeds(line_of("gc.collect()")) is False  # a module's function changes no value of the loop's
    assert flow.feeds(line_of("torch.save(")) is False
    assert flow.feeds(line_of("print(step, health)")) is False
    assert flow.feeds(line_of("def get_batch")) is None  # not the loop's line


def test_a_hand_written_update_is_the_update_and_a_gradient_norm_is_not() -> None:
    assert is_update_function(TRAIN, "sgd", line_of("p.data -= lr"))
    assert not is_update_function(TRAIN, "grad_norm", line_of("return sum(p.grad.norm()"))
    assert not is_update_function(TRAIN, "weight_health", line_of("vals = w.tolist()"))
    update = textwrap.dedent("""\
        def main(model, x):
            while True:
                loss = model(x).sum()
                loss.backward()
                with torch.no_grad():
                    for p, v in zip(model.parameters(), velocity):
                        v.mul_(0.9).add_(p.grad)
                        p.sub_(0.01 * v)
                print(loss)
    """)
    lines = update.splitlines()
    at = {text: next(i + 1 for i, line in enumerate(lines) if text in line)
          for text in ("loss = model", "loss.backward", "p.sub_", "v.mul_", "print(loss)")}
    flow = loop_flow(update, "main", at["loss = model"], {at["loss = model"], at["loss.backward"]})
    assert flow is not None
    assert flow.updates(at["p.sub_"]) and flow.updates(at["v.mul_"])
    assert not flow.updates(at["print(loss)"]) and not flow.updates(at["loss.backward"])


def test_every_sample_gets_a_part_and_the_loops_own_work_is_named_by_its_line() -> None:
    samples = job_samples()
    _, _, place = place_of(samples)
    lines = sample_budget(samples, [], place)
    assert sum(line.share for line in lines) == pytest.approx(1.0)
    by_part = {line.part: line for line in lines if line.part != "loop_work"}
    total = sum(s.count for s in samples)
    assert by_part["forward"].share == pytest.approx(30 / total)
    assert by_part["input_wait"].share == pytest.approx(10 / total)  # no on-CPU sampler here: all waiting
    assert by_part["io"].share == pytest.approx(6 / total)
    assert by_part["gc"].share == pytest.approx(8 / total)
    assert by_part["gc"].at == f"main (train.py:{line_of('gc.collect()')})"
    own = [line for line in lines if line.part == "loop_work"]
    # One line per function the loop called, named by its costliest line.
    assert [(line.at, round(line.share * total)) for line in own] == [
        (f"weight_health (train.py:{line_of('vals = w.tolist()')})", 16)]
    assert own[0].avoidable and not by_part["forward"].avoidable
    assert all(0 < line.margin < 0.2 for line in lines)


def test_the_loops_call_for_a_batch_is_input_and_its_metrics_are_not() -> None:
    samples = job_samples()
    loop, flow, _ = place_of(samples)
    assert loop == ("main", FILE)
    calls = {input_call(s, loop, flow) for s in samples}
    assert calls == {None, "get_batch (train.py)"}
    # Without the loop's source (it cannot be read), every call of the loop's counts as input, as before.
    assert input_call(samples[4], loop, None) == "weight_health (train.py)"


def test_making_input_on_the_cpu_is_told_from_waiting_for_it() -> None:
    samples = job_samples()
    _, _, place = place_of(samples)
    active = [s for s in samples if s.category != sc.OTHER or s.stack[-1][0] == "get_batch"]
    active[3] = sample(sc.OTHER, [loop_at("xb, yb = get_batch(step)"), ("get_batch", FILE, 4)], 6)
    lines = sample_budget(samples, active, place)
    assert part_share(lines, "input_cpu") == pytest.approx(6 / 110)
    assert part_share(lines, "input_wait") == pytest.approx(4 / 110)


def test_timed_shares_replace_their_estimates_and_the_rest_is_scaled() -> None:
    lines = [BudgetLine("forward", 0.5, 0.05), BudgetLine("input_wait", 0.3, 0.05),
             BudgetLine("io", 0.2, 0.04, at="save (train.py:9)")]
    refined = {line.part: line for line in refine(lines, {"input": 0.1, "io": 0.3})}
    assert refined["io"].share == pytest.approx(0.3) and refined["io"].timed and refined["io"].at == "save (train.py:9)"
    assert refined["input_wait"].share == pytest.approx(0.1)
    assert refined["forward"].share == pytest.approx(0.6)  # the rest fills what the timers leave
    assert sum(line.share for line in refined.values()) == pytest.approx(1.0)


# --- the walk: the largest departing share first -------------------------------------------------

@pytest.fixture(scope="module")
def slow_training():  # type: ignore[no-untyped-def]
    return find_playbook("slow-training")


def walk_of(playbook, overrides: dict[str, dict[str, object]]) -> Walk:  # type: ignore[no-untyped-def]
    values = healthy_values()
    for probe, changed in overrides.items():
        values[probe] = {**values[probe], **changed}
    walk = Walk(playbook, lambda: LAUNCH, FakeMeasure(values))
    walk.run()
    return walk


def test_the_larger_of_two_departing_shares_is_named_first(slow_training) -> None:  # type: ignore[no-untyped-def]
    walk = walk_of(slow_training, {
        "loop.steps": {"data_wait_fraction": 0.21, "producer": "the training thread", "producer_cpu_fraction": 0.9,
                       "io_fraction": 0.38, "save_fraction": 0.36, "io_at": "main (train.py:48)"}})
    assert walk.verdict == DEPARTURE
    assert walk.departure is not None and walk.departure.cause.id == "host.blocking_io"
    assert walk.departure.share == pytest.approx(0.38) and walk.departure.at == "main (train.py:48)"
    assert [(d.cause.id, d.share) for d in walk.also] == [("input.cpu_bound", 0.21)]
    # Walked in the playbook's order: input first, then the I/O, then the rest of the shares.
    nodes = [r.node for r in walk.path]
    assert nodes.index("input.producer") < nodes.index("host.blocking-io") < nodes.index("host.overhead")


def test_the_same_order_whichever_fault_is_larger(slow_training) -> None:  # type: ignore[no-untyped-def]
    walk = walk_of(slow_training, {
        "loop.steps": {"data_wait_fraction": 0.45, "producer": "the training thread", "producer_cpu_fraction": 0.9,
                       "io_fraction": 0.13, "save_fraction": 0.13},
        "stacks.sample": {"loop_work_fraction": 0.3, "loop_work_at": "weight_health (train.py:21)"}})
    assert walk.departure is not None and walk.departure.cause.id == "input.cpu_bound"
    assert [d.cause.id for d in walk.also] == ["host.loop_work", "host.blocking_io"]
    assert walk.also[0].at == "weight_health (train.py:21)"


def test_a_switch_left_on_ends_the_walk_and_comes_first(slow_training) -> None:  # type: ignore[no-untyped-def]
    walk = walk_of(slow_training, {"torch.flags": {"anomaly_detection": True, "debug_switches": "anomaly mode"}})
    assert walk.departure is not None and walk.departure.cause.id == "host.debug_mode"
    assert walk.departure.share is None and walk.also == []
    assert walk.path[-1].node == "env.debug-flags"


def test_the_report_carries_the_budget_and_the_other_departures(slow_training) -> None:  # type: ignore[no-untyped-def]
    walk = walk_of(slow_training, {
        "loop.steps": {"data_wait_fraction": 0.21, "producer": "the training thread", "producer_cpu_fraction": 0.9,
                       "io_fraction": 0.38, "save_fraction": 0.36, "io_at": "main (train.py:48)"}})
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "train.py"]}, {})
    findings.budget = [BudgetLine("io", 0.38, 0.05, at="main (train.py:48)", timed=True).to_json(),
                       BudgetLine("forward", 0.3, 0.05).to_json(), BudgetLine("input_cpu", 0.21, 0.04).to_json(),
                       BudgetLine("backward", 0.11, 0.03).to_json()]
    data = findings.to_json()
    assert data["first_departure"]["cause"] == "host.blocking_io" and data["first_departure"]["share"] == 0.38
    assert [a["cause"] for a in data["also_departing"]] == ["input.cpu_bound"]
    again = Findings.from_json(data)
    assert again.budget == findings.budget and again.also_departing == findings.also_departing
    md = to_markdown(again)
    assert "### Step budget" in md and "### Also departing" in md
    assert "| file/network I/O | 38% ± 5% (timed) | ███████▋ | `main (train.py:48)` | yes |" in md
    assert "Outside the model's own work, 10% or more of the step: file/network I/O 38% at " in md


def test_a_callback_a_trainer_runs_is_the_jobs_own_work_and_a_training_step_return_feeds() -> None:
    trainer = "/usr/lib/python3.11/site-packages/transformers/trainer.py"
    callback = sample(sc.OTHER, [("main", FILE, 70), ("Trainer.train", trainer, 1), ("on_step_end", FILE, 12)], 9)
    step = textwrap.dedent("""\
        def training_step(self, batch, i):
            x, y = batch
            logits = self(x)
            loss = (logits - y).pow(2).mean()
            acc = (logits.argmax(1) == y).float().mean()
            return loss
    """)
    lines = step.splitlines()
    forward = next(i + 1 for i, line in enumerate(lines) if "self(x)" in line)
    flow = loop_flow(step, "training_step", forward, {forward})
    assert flow is not None
    assert flow.feeds(4) is True  # the loss it returns: the framework's backward reads it
    assert flow.feeds(5) is False  # an accuracy nobody reads in the step
    place = sample_part(callback, ("training_step", FILE), flow, lambda s: False, framework_frame,
                        lambda *a: False)
    assert (place.part, place.at, place.group) == ("loop_work", "on_step_end (train.py:12)", "on_step_end (train.py)")


def test_a_stragglers_verdict_names_its_largest_share_beside_the_model() -> None:
    from fieldguide.analysis.ranks import RankStats, own_reading
    from fieldguide.probes.dist import beside_the_model

    budget = [BudgetLine("backward", 0.4, 0.05).to_json(), BudgetLine("collective", 0.2, 0.04).to_json(),
              BudgetLine("sleep", 0.33, 0.05, at="on_step_end (train.py:12)").to_json(),
              BudgetLine("io", 0.05, 0.02).to_json()]
    beside = beside_the_model(budget)
    assert beside == "sleeping at on_step_end (train.py:12), 33%"
    assert beside_the_model(budget[:2] + budget[3:]) is None  # nothing beside the model reaches a tenth
    rank = RankStats(rank=1, pid=7, host="h", steps=0, step_ms=None, data_wait=0.02, collective_wait=0.05,
                     beside=beside)
    assert own_reading(rank).endswith("the largest share beside the model: sleeping at on_step_end (train.py:12), 33%")
    assert "beside" not in rank.row()


def test_a_torn_stack_does_not_make_a_metrics_line_part_of_the_step() -> None:
    """py-spy --nonblocking once stitched an optimizer's frames under the line of a metrics call:
    one such sample must not make that line feed the step."""
    samples = job_samples()
    torn = sample(sc.OPTIMIZER, [loop_at("health = weight_health("), ("weight_health", FILE, line_of("vals = w")),
                                 ("SGD.step", "/site-packages/torch/optim/sgd.py", 1)], 1)
    loop, flow, place = place_of([*samples, torn])
    assert flow is not None and flow.feeds(line_of("health = weight_health(")) is False
    assert input_call(samples[4], loop, flow) is None


def flow_for(source: str, function: str, *sinks: str, returns_feed: bool = True):  # type: ignore[no-untyped-def]
    lines = source.splitlines()
    at = {next(i + 1 for i, line in enumerate(lines) if text in line) for text in sinks}
    flow = loop_flow(source, function, min(at), at, returns_feed=returns_feed)
    assert flow is not None
    return flow, lambda text: next(i + 1 for i, line in enumerate(lines) if text in line)


def test_a_method_calling_its_own_helpers_does_not_feed_the_step_by_it() -> None:
    flow, line = flow_for(textwrap.dedent("""\
        def run(self):
            while True:
                x, y = self.next_batch()
                loss = self.model(x, y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                self.trigger_callbacks("on_batch_end")
                self.log_buffer = loss.item()
    """), "run", "self.model(x, y)", "loss.backward()", "self.optimizer.step()")
    assert flow.feeds(line("self.next_batch()")) is True
    assert flow.feeds(line("self.optimizer.zero_grad()")) is True
    assert flow.feeds(line("self.trigger_callbacks")) is False
    assert flow.feeds(line("self.log_buffer")) is False


def test_what_a_loop_returns_feeds_only_a_step_a_framework_runs_and_a_yield_hands_back() -> None:
    source = textwrap.dedent("""\
        def train(model, loader, opt):
            history = []
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                opt.step()
                m = weight_stats(model)
                history.append(m)
            return history
    """)
    flow, line = flow_for(source, "train", "model(x, y)", "loss.backward()", "opt.step()", returns_feed=False)
    assert flow.feeds(line("m = weight_stats")) is False
    flow, line = flow_for(textwrap.dedent("""\
        def steps(model, batches):
            stats = None
            for x in batches:
                loss = model(x)
                stats = expensive(stats)
                yield loss, stats
    """), "steps", "model(x)")
    assert flow.feeds(line("stats = expensive")) is True


def test_work_in_the_loop_that_calls_a_train_step_helper_is_the_loops_own_work() -> None:
    source = textwrap.dedent("""\
        def train_step(model, opt, x, y):
            loss = model(x, y)
            loss.backward()
            opt.step()

        def main(model, opt, data):
            for x, y in data:
                train_step(model, opt, x, y)
                health = weight_health(model)
    """)
    lines = source.splitlines()

    def at(text: str) -> int:
        return next(i + 1 for i, line in enumerate(lines) if text in line)

    main = ("main", FILE, at("    train_step(model, opt, x, y)"))
    samples = [
        sample(sc.FORWARD, [main, ("train_step", FILE, at("loss = model")), ("Module._call_impl", MODULE, 1)], 20),
        sample(sc.BACKWARD, [main, ("train_step", FILE, at("loss.backward")),
                             ("Tensor.backward", "/site-packages/torch/_tensor.py", 1)], 20),
        sample(sc.OTHER, [("main", FILE, at("health = weight_health")), ("weight_health", FILE, 40)], 15),
    ]
    from fieldguide.probes.step_budget import outer_loops

    loop = loop_frame(samples)
    assert loop == ("train_step", FILE)
    outer = outer_loops(samples, loop, lambda file: source)
    flow = flow_of(samples, loop, lambda file: source)
    assert outer and outer[0][0] == ("main", FILE) and outer[0][1] is not None, outer
    place = sample_part(samples[2], loop, flow, lambda s: False, framework_frame, lambda *a: False, outer)
    assert (place.part, place.at) == ("loop_work", "weight_health (train.py:40)")


def test_a_share_whose_cause_is_not_named_is_said_beside_the_one_that_is(slow_training) -> None:  # type: ignore[no-untyped-def]
    from fieldguide.measurement import Measurement

    values = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "data_wait_fraction": 0.45, "io_fraction": 0.2,
                            "save_fraction": 0.2}
    values["stacks.sample"] = Measurement(probe="stacks.sample", values={**values["stacks.sample"],
                                                                        "producer_cpu_fraction": None})
    values["process.cpu"] = Measurement.cannot("process.cpu", "the target exited")
    walk = Walk(slow_training, lambda: LAUNCH, FakeMeasure(values))
    walk.run()
    assert walk.departure is not None and walk.departure.cause.id == "host.blocking_io"
    assert "also departing, its cause not named: input.producer could not decide the cause" in walk.caveat
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": []}, {})
    assert "its cause not named" in findings.note


def test_a_walk_cut_short_keeps_the_causes_it_named(slow_training) -> None:  # type: ignore[no-untyped-def]
    values = healthy_values()
    values["loop.steps"] = {**values["loop.steps"], "data_wait_fraction": 0.6, "producer": "the training thread",
                            "producer_cpu_fraction": 0.9}
    walk = Walk(slow_training, lambda: LAUNCH, FakeMeasure(values))
    walk.run(stop=lambda: bool(walk.path) and walk.path[-1].node == "input.producer")
    assert walk.finished and walk.verdict == DEPARTURE
    assert walk.departure is not None and walk.departure.cause.id == "input.cpu_bound"
    assert walk.departure.chain == ("input.data-wait", "input.producer")
    assert "cut short" in walk.caveat


def test_overhead_is_what_is_outside_ops_less_what_the_budget_names() -> None:
    from fieldguide.probes.opprofile import overhead_share

    # Gradient-norm logging between the backward and the update: 58% of the step, named as the
    # loop's own work, is not overhead as well.
    assert overhead_share({"op_time_fraction": 0.4, "phase_fraction": 0.02},
                          {"loop_work_fraction": 0.58}) == pytest.approx(0.03, abs=0.01)
    # Work after the update is in the phases the profile left out: not subtracted twice.
    assert overhead_share({"op_time_fraction": 0.8, "phase_fraction": 0.5},
                          {"loop_work_fraction": 0.5}) == pytest.approx(0.1)
    assert overhead_share({"op_time_fraction": 0.3, "phase_fraction": 0.0}, {}) == pytest.approx(0.7)
    # Gradient accumulation whose next micro-batch is tokenized in Python between two forwards:
    # 82% of the step making input, outside every phase, is the input's share, not overhead.
    made = {"data_wait_fraction": 0.82, "input_from": "next_micro_batch (train.py), in the loop"}
    assert overhead_share({"op_time_fraction": 0.18, "phase_fraction": 0.0}, made) == pytest.approx(0.0)
    # A DataLoader's time is out of the profile already: not taken out twice.
    loader = {"data_wait_fraction": 0.5, "input_from": "DataLoader.__next__"}
    assert overhead_share({"op_time_fraction": 0.6, "phase_fraction": 0.5}, loader) == pytest.approx(0.2)


def test_a_budget_whose_every_part_was_timed_still_adds_up() -> None:
    refined = refine([BudgetLine("input_wait", 1.0, 0.05)], {"input": 0.5})
    assert sum(line.share for line in refined) == pytest.approx(1.0)
    assert {line.part for line in refined} == {"input_wait", "other"}


HAND_UPDATE = textwrap.dedent("""\
    def sgd(params, lr):
        for p in params:
            p.data -= lr * p.grad

    def main(model, loss_fn, xb, yb):
        while True:
            loss = loss_fn(model(xb), yb)
            loss.backward()
            sgd(model.parameters(), 0.1)
            print(loss)
""")


def test_a_sample_on_the_line_that_calls_a_hand_written_update_is_the_update() -> None:
    """The thread in a hand-written update the loop calls through a decorator's wrapper (a library
    frame between them), or standing on the loop's `sgd(...)` line with no callee (making the
    call, a torn stack): the update, not the loop's own work. A line of metrics the loop runs
    beside the step stays its own work."""
    lines = HAND_UPDATE.splitlines()

    def at(text: str) -> int:
        return next(i + 1 for i, line in enumerate(lines) if text in line)

    loop = ("main", FILE)
    samples = [
        sample(sc.FORWARD, [("main", FILE, at("loss = loss_fn")), ("Module._call_impl", MODULE, 1)], 40),
        sample(sc.BACKWARD, [("main", FILE, at("loss.backward()")),
                             ("Tensor.backward", "/site-packages/torch/_tensor.py", 1)], 30),
        # In the update through `@torch.no_grad()`'s wrapper: a library frame between loop and update.
        sample(sc.OTHER, [("main", FILE, at("sgd(model")),
                          ("decorate_context", "/site-packages/torch/utils/_contextlib.py", 124),
                          ("sgd", FILE, at("p.data -= lr"))], 10),
        sample(sc.OTHER, [("main", FILE, at("sgd(model"))], 15),  # on the line, no callee
        sample(sc.OTHER, [("main", FILE, at("print(loss)"))], 5),
    ]
    flow = flow_of(samples, loop, lambda file: HAND_UPDATE if file == FILE else None)

    def is_update(file: str, func: str, line: int) -> bool:
        return file == FILE and is_update_function(HAND_UPDATE, func, line)

    assert update_call_lines(samples, loop, is_update) == {at("sgd(model")}
    update_lines = update_call_lines(samples, loop, is_update)

    def place(s: sc.ThreadSample):  # type: ignore[no-untyped-def]
        return sample_part(s, loop, flow, lambda x: False, framework_frame, is_update, None, update_lines)

    assert place(samples[2]).part == "update" and place(samples[3]).part == "update"
    assert place(samples[4]).part != "update"
    # Without the line known to call the update, that sample read as the loop's own work.
    assert sample_part(samples[3], loop, flow, lambda x: False, framework_frame, is_update).part == "loop_work"
