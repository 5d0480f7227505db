"""The sentinel's phases, walks and events on a constructed source and a stand-in walk: one
event per settled shift, the baseline learned anew after it, events.jsonl line by line."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fieldguide.frontends.watchline import event_line
from fieldguide.watch.detect import SeriesShape
from fieldguide.watch.rules import load_rules
from fieldguide.watch.sentinel import EVENTS_FILE, Sentinel
from fieldguide.watch.sources import Polled

RULES = replace(load_rules(), warmup_s=5, learn_s=20, window_s=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class StepSource:
    """20 steps a second of `ms(t)` each, from `trains_at` on."""

    kind = "launch"
    shape = SeriesShape()

    def __init__(self, clock: Clock, ms: Any, trains_at: float = 1002.0) -> None:
        self.clock, self.ms, self.trains_at = clock, ms, trains_at
        self.last = trains_at
        self.steps = 0
        self.closed = False

    def poll(self, now: float) -> Polled:
        polled = Polled()
        t = max(self.last, self.trains_at)
        while t + 0.05 <= now:
            t += 0.05
            self.steps += 1
            polled.add("step_ms", t, self.ms(t))
            polled.add("input_share", t, 0.1)
        self.last = t
        polled.steps_total = self.steps
        return polled

    def missing(self) -> dict[str, str]:
        return {"gpu_util": "NVML unavailable: no driver"}

    def hold(self, holding: bool) -> None:
        self.held = holding

    def close(self) -> None:
        self.closed = True


class Target:
    pid = 4242

    def __init__(self) -> None:
        self.alive_now = True

    def alive(self) -> bool:
        return self.alive_now

    ended: dict[str, Any] | None = None  # Target.ending(): how the job ended on its own

    def ending(self) -> dict[str, Any] | None:
        return None if self.alive_now else self.ended

    def gone_reason(self) -> str:
        return "the target exited with status 0"

    def describe(self) -> dict[str, Any]:
        return {"kind": "launch", "pid": self.pid}


class Walk:
    """A stand-in walk: its findings name a cause, at once."""

    def __init__(self, playbook: str, target: Any, walked: list[str]) -> None:
        self.playbook = playbook
        walked.append(playbook)
        self.runner = SimpleNamespace(discard_artifacts=lambda: None)

    def run(self) -> Any:
        return SimpleNamespace(playbook=self.playbook, verdict="departure", conclusion=None,
                               first_departure={"cause": "input.waiting"})

    def cancel(self, note: str) -> None:
        pass


def drive(sentinel: Sentinel, clock: Clock, until: float) -> None:
    while clock.now < until and sentinel.ended is None:
        clock.now += 1.0
        sentinel.tick(clock.now)
        walking = sentinel.walking
        if walking is not None:
            walking.done.wait(5)


def make(tmp_path: Path, ms: Any, walked: list[str], **kwargs: Any) -> tuple[Sentinel, Clock, Target]:
    clock, target = Clock(), Target()
    source = StepSource(clock, ms)
    source.job_alive = target.alive  # type: ignore[method-assign]
    written: list[str] = []
    sentinel = Sentinel(target, source, RULES, tmp_path, clock=clock, on_event=lambda e: written.append(event_line(e)),
                        session_factory=lambda playbook, t: Walk(playbook, t, walked), **kwargs)
    sentinel.written = written  # type: ignore[attr-defined]
    return sentinel, clock, target


def test_a_shift_is_one_event_with_its_walk_and_the_shifted_job_is_learned_anew(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("fieldguide.watch.sentinel.Sentinel._write_report", lambda self, f: tmp_path / "r.json")
    walked: list[str] = []
    sentinel, clock, _ = make(tmp_path, lambda t: 50.0 if t < 1060 else 80.0, walked)
    sentinel.emit("start")
    drive(sentinel, clock, 1200)
    kinds = [e["kind"] for e in sentinel.events]
    assert kinds == ["start", "baseline", "departing", "departure", "baseline"], kinds
    assert walked == ["slow-training"]
    departure = next(e for e in sentinel.events if e["kind"] == "departure")
    assert departure["cause"] == "input.waiting" and departure["report"] == str(tmp_path / "r.json")
    hold = next(s.sustain_s for s in RULES.signals if s.id == "step_time")
    assert 60 + hold <= departure["detected_t"] <= 60 + hold + RULES.window_s + 1
    assert departure["changed"][0]["signal"] == "step_time" and departure["changed"][0]["baseline"] == 50.0
    learned = [e for e in sentinel.events if e["kind"] == "baseline"]
    assert learned[1]["baseline"]["step_ms"] == 80.0  # the shifted job is its new self
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == kinds
    assert any("cause      input.waiting" in w for w in sentinel.written)  # type: ignore[attr-defined]


def test_a_steady_job_has_no_event_and_the_watch_ends_with_its_duration(tmp_path: Path) -> None:
    walked: list[str] = []
    sentinel, clock, _ = make(tmp_path, lambda t: 50.0 + (3000.0 if int(t) % 40 == 0 else 0.0), walked, duration=300)
    drive(sentinel, clock, 1400)
    assert walked == [] and sentinel.departures == 0
    assert sentinel.ended == "watched for 300 s"
    assert [e["kind"] for e in sentinel.events] == ["baseline", "end"]


def test_the_watch_ends_when_the_job_does(tmp_path: Path) -> None:
    sentinel, clock, target = make(tmp_path, lambda t: 50.0, [])
    drive(sentinel, clock, 1010)
    target.alive_now = False
    drive(sentinel, clock, 1020)
    assert sentinel.ended == "the target exited with status 0"
    assert sentinel.events[-1]["kind"] == "end"


def test_run_emits_start_with_what_cannot_be_measured_and_closes_the_source(tmp_path: Path) -> None:
    sentinel, clock, target = make(tmp_path, lambda t: 50.0, [])
    target.alive_now = False
    threading.Thread(target=sentinel.run).run()
    start = sentinel.events[0]
    assert start["kind"] == "start" and start["missing"] == {"gpu_util": "NVML unavailable: no driver"}
    assert sentinel.source.closed


def test_each_event_is_one_line_with_its_numbers() -> None:
    lines = [event_line(e) for e in (
        {"t": 0.0, "kind": "start", "target": {"pid": 7}, "missing": {"step_ms": "attached"}},
        {"t": 41.2, "kind": "baseline", "baseline": {"step_ms": 52.14, "input_share": 0.031, "memory_mb": 0.4}},
        {"t": 87.0, "kind": "departing", "playbook": "oom", "changed": [
            {"title": "memory growth", "series": "memory_mb", "baseline": 0.4, "now": 257.6}]},
        {"t": 96.0, "kind": "departure", "playbook": "oom", "cause": "memory.leak_across_steps", "walk_s": 9.2,
         "report": "out/r.json"},
        {"t": 99.0, "kind": "departure", "playbook": "oom", "cause": None, "verdict": "inconclusive", "walk_s": 3,
         "error": "TargetGone: the job ended"},
        {"t": 154.0, "kind": "end", "why": "the job ended", "departures": 1},
    )]
    assert all("\n" not in line for line in lines)
    assert lines[0].endswith("pid 7 (no step_ms: attached)")
    assert "step 52.1 ms · input 3% · memory +0.4 MB/min" in lines[1]
    assert "memory growth +0.4 MB/min → +257.6 MB/min: walking oom" in lines[2]
    assert "cause      memory.leak_across_steps (oom, 9 s walk) → out/r.json" in lines[3]
    assert "walked     inconclusive (oom, 3 s walk) (TargetGone: the job ended)" in lines[4]
    assert lines[5].endswith("end        the job ended; 1 departure")


def test_the_gpu_reader_reads_only_the_jobs_gpus_and_says_once_why_not() -> None:
    from fieldguide.watch.sources import GpuReader
    from tests.unit.nvml_fake import FakeGpu, fake_pynvml

    mine = FakeGpu(uuid="GPU-mine", util=[(1, 80)], processes={100: 3 * 2**30, 101: 2**30}, gpm={2: 61.0})
    other = FakeGpu(uuid="GPU-other", util=[(1, 5)], processes={999: 40 * 2**30}, gpm={2: 3.0})
    reader = GpuReader(lambda: {100, 101}, fake_pynvml([mine, other]))
    first = reader.read()
    assert first.memory_mb == 4096 and first.util == 80  # the job's device only, its processes only
    assert first.sm_active is None  # GPM needs two samples
    assert reader.read().sm_active == 61.0 and reader.missing() == {}
    old = GpuReader(lambda: {100}, fake_pynvml([FakeGpu(processes={100: 2**30})]))  # no GPM on this part
    old.read()
    assert old.read().sm_active is None and "GPM" in old.missing()["sm_active"]
    absent = GpuReader(lambda: {100}, fake_pynvml([], init_error="Driver Not Loaded"))
    assert absent.read().util is None and "Driver Not Loaded" in (absent.reason or "")
    assert absent.read().util is None  # said once, not tried again each second
    assert set(absent.missing()) == {"gpu_util", "sm_active"}


def test_a_launched_source_takes_only_the_items_it_has_not_seen(monkeypatch) -> None:
    import socket
    import tempfile

    from fieldguide.agent import channel
    from fieldguide.agent.channel import AgentConnection, AgentServer
    from fieldguide.watch.sources import LaunchSource

    monkeypatch.setattr(channel, "MAX_STREAM_ITEMS", 5)
    with tempfile.TemporaryDirectory(prefix="fg-") as short:  # a socket's path is short
        server = AgentServer(Path(short))
        ends = socket.socketpair()
        try:
            conn = AgentConnection(ends[0])
            stream = conn.stream("loop", "steps")

            def arrive(*items: int) -> None:
                stream.items.extend(items)
                stream.total += len(items)

            source = LaunchSource.__new__(LaunchSource)
            source.target, source.seen = SimpleNamespace(agent=server), {}
            arrive(1, 2, 3)
            assert source._new(conn, "loop", "steps") == [1, 2, 3]
            assert source._new(conn, "loop", "steps") == []
            arrive(4, 5, 6, 7)  # the deque keeps 5: 3..7
            assert source._new(conn, "loop", "steps") == [4, 5, 6, 7]
            arrive(*range(8, 20))  # more than it keeps arrived between two polls
            assert source._new(conn, "loop", "steps") == [15, 16, 17, 18, 19]
            other = AgentConnection(ends[1])  # a new connection starts from its first item
            other.stream("loop", "steps").items.extend([41, 42])
            other.stream("loop", "steps").total = 2
            assert source._new(other, "loop", "steps") == [41, 42]
        finally:
            server.close()
            for end in ends:
                end.close()


@pytest.mark.parametrize(("ended", "at", "failed"), [
    ({"code": 2, "signal": None}, 1010, "exited with status 2"),  # python nosuchscript.py
    ({"code": None, "signal": "SIGKILL"}, 1200, "killed by SIGKILL"),  # the OOM killer, mid-watch
    ({"code": 0, "signal": None}, 1005, "ended before its baseline was learned"),
    ({"code": 0, "signal": None}, 1200, None),
])
def test_the_watchs_exit_status_says_how_the_job_ended(tmp_path: Path, ended: dict[str, Any], at: float,
                                                        failed: str | None) -> None:
    """Issue 33: `fieldguide watch -- python train.py && echo healthy` said healthy for a crash."""
    sentinel, clock, target = make(tmp_path, lambda t: 50.0, [])
    drive(sentinel, clock, at)
    target.alive_now, target.ended = False, ended
    drive(sentinel, clock, at + 10)
    end = sentinel.events[-1]
    assert end["kind"] == "end"
    if failed is None:
        assert sentinel.exit_status == 0 and "job_failed" not in end
    else:
        assert sentinel.exit_status == 3 and failed in end["job_failed"]
        assert failed in event_line(end)


def test_events_carry_the_command_line_redacted(tmp_path: Path) -> None:
    """Issue 33: events.jsonl, the file offered to log shippers, carried `--api-key=` and `--pass X`."""
    sentinel, _, target = make(tmp_path, lambda t: 50.0, [])
    target.describe = lambda: {"kind": "launch", "pid": 1,  # type: ignore[method-assign]
                               "cmdline": ["python", "t.py", "--api-key=sk-abcdefghijklmnopqrstuvwxyz",
                                           "--pass", "hunter2", "https://u:pw123@host/x"]}
    sentinel.emit("start", target=target.describe())
    written = (tmp_path / EVENTS_FILE).read_text()
    for secret in ("sk-abcdefghijklmnopqrstuvwxyz", "hunter2", "pw123"):
        assert secret not in written
    assert "--pass" in written and "[redacted]" in written


def test_redaction_knows_the_shapes_a_colleagues_command_uses() -> None:
    from fieldguide.report.redact import redact_argv, redact_text

    assert redact_argv(["t.py", "--passphrase", "X1", "--login", "user:X2"]) == [
        "t.py", "--passphrase", "[redacted]", "--login", "[redacted]"]
    assert redact_argv(["mysql", "-pX3", "-h", "db"]) == ["mysql", "-p[redacted]", "-h", "db"]
    assert redact_argv(["mysql", "-p", "X4"]) == ["mysql", "-p", "[redacted]"]
    said = redact_text("the password hunter2 was used -----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n"
                       "-----END OPENSSH PRIVATE KEY-----")
    assert "hunter2" not in said and "b3Blbn" not in said
    assert redact_text("tokenizer gpt2, passwords are hashed") == "tokenizer gpt2, passwords are hashed"


class CountingAgent:
    """An agent whose FLOP count answers 2.5 GFLOP a step (or fails), with one connection's steps."""

    def __init__(self, conn: Any, ok: bool = True) -> None:
        self.conn, self.ok, self.asked = conn, ok, 0

    def primary(self) -> Any:
        return self.conn

    def ranks(self) -> list[Any]:
        return []

    def snapshot(self, conn: Any, capability: str, name: str, since: int = 0) -> tuple[int, list[Any]]:
        items = list(conn.stream(capability, name).items)
        return len(items), items[since:]

    def request(self, capability: str, params: dict[str, Any], timeout: float = 10.0) -> Any:
        assert capability == "efficiency" and params["count"] is True
        self.asked += 1
        if not self.ok:
            return SimpleNamespace(ok=False, error="no training step came to count", result={})
        return SimpleNamespace(ok=True, error=None, result={"flops": {"float32 cpu matmul": 2.0e9,
                                                                      "float32 cpu conv": 0.5e9}})


def test_launched_the_achieved_rate_is_a_series_from_a_count_a_minute(monkeypatch) -> None:
    from fieldguide.agent.channel import AgentConnection
    from fieldguide.agent.inside.rows import StepRow
    from fieldguide.watch import sources

    ends = socket.socketpair()
    try:
        conn = AgentConnection(ends[0])
        agent = CountingAgent(conn)
        source = sources.LaunchSource.__new__(sources.LaunchSource)
        source.target, source.seen, source.main = SimpleNamespace(agent=agent), {}, None
        source.gpu = SimpleNamespace(add_to=lambda polled, now, memory: True, missing=lambda: {})
        source.flops = sources.FlopCounts(source.target)

        def steps(*ends_at: float) -> None:
            stream = conn.stream("loop", "steps")
            for t in ends_at:
                stream.items.append(list(StepRow(t_end=t, wall_s=0.05, loader_wait_s=0.0, boundary="o",
                                                 input_s=0.0, input_cpu_s=0.0, loader_cpu_s=None, backwards=1,
                                                 closures=0, forwards=1, save_s=0.0, batch_elements=None)))
            stream.total += len(ends_at)

        steps(1.0, 1.05)
        source.poll(1.1)  # the count is asked for, on a thread
        source.flops.thread.join(5)
        steps(1.10)
        polled = source.poll(1.2)
        assert polled.points["gflops"] == [(1.10, pytest.approx(50.0))]  # 2.5 GFLOP in 50 ms
        source.poll(30.0)
        assert agent.asked == 1  # once a minute, not every poll
        source.hold(True)  # a walk measures: no count of the watch's own
        source.poll(100.0)
        assert agent.asked == 1
        source.hold(False)
        source.poll(100.5)
        source.flops.thread.join(5)
        assert agent.asked == 2 and "gflops" not in source.missing()
        agent.ok = False
        source.poll(200.0)
        source.flops.thread.join(5)
        assert source.flops.gflop == pytest.approx(2.5)  # the last count stands
    finally:
        for end in ends:
            end.close()


def test_a_count_that_never_came_is_said_and_attached_there_is_none() -> None:
    from fieldguide.watch import sources

    flops = sources.FlopCounts(SimpleNamespace(agent=CountingAgent(None, ok=False)))
    flops.maybe_ask(1.0)
    assert flops.thread is not None
    flops.thread.join(5)
    assert flops.gflop is None and "did not count" in (flops.reason or "")
    attach = sources.AttachSource.__new__(sources.AttachSource)
    attach.gpu, attach.stack_reason = SimpleNamespace(missing=lambda: {}), None
    assert "launched job" in attach.missing()["gflops"]
