"""stacks.sample's py-spy samplers end with the probe on every path: a finished window, cancel,
an exception, Ctrl-C or SIGTERM. A fake py-spy stands in, so no ptrace is needed."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fieldguide.probes import stack_recording, stacks
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.stacks import StackSample

FAKE_SPY = """#!{python}
import os, signal, sys, time
args = sys.argv[1:]
out = args[args.index("--output") + 1]
record = os.environ["FAKE_SPY_DIR"]
with open(os.path.join(record, f"{{os.getpid()}}.pid"), "w") as f:
    f.write(out)

def finish(*_):
    with open(out, "w") as f:
        f.write("thread ({main}): MainThread;<module> (train.py:1);step (train.py:2) 7\\n")
    sys.exit(0)

signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("FAKE_SPY_DEAF") else finish)
time.sleep(60)
"""


class Me:
    """The target: this test process (alive throughout)."""

    kind = "attach"
    pid = os.getpid()
    agent = None

    def alive(self) -> bool:
        return True

    def gone_reason(self) -> str:
        return "gone"


@pytest.fixture
def fake_spy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    record = tmp_path / "record"
    record.mkdir()
    spy = tmp_path / "py-spy"
    spy.write_text(FAKE_SPY.format(python=sys.executable, main=os.getpid()))
    spy.chmod(0o755)
    monkeypatch.setenv("FAKE_SPY_DIR", str(record))
    monkeypatch.setattr("fieldguide.host.access.py_spy_path", lambda: str(spy))
    return record


def started(record: Path, n: int = 2, timeout: float = 10) -> dict[int, Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = list(record.glob("*.pid"))
        if len(files) >= n and all(f.read_text() for f in files):
            return {int(f.stem): Path(f.read_text()) for f in files}
        time.sleep(0.05)
    raise AssertionError(f"the fake py-spy did not start: {list(record.iterdir())}")


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_during_the_window_ends_and_reaps_py_spy_before_the_temp_dir_goes(fake_spy: Path) -> None:
    seen: dict[int, Path] = {}

    def on_reading(reading: dict[str, Any]) -> None:
        if reading.get("elapsed"):  # the window is running: the user presses Ctrl-C (or SIGTERM arrives)
            seen.update(started(fake_spy))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        StackSample().run(ProbeContext(target=Me(), on_reading=on_reading), seconds=30)
    assert len(seen) == 2
    for pid, out in seen.items():
        assert not running(pid), f"py-spy {pid} outlived the probe"
        assert not out.parent.exists(), "the temp dir is removed only after py-spy is gone"


def test_cancel_stops_the_samplers_and_keeps_what_they_wrote(fake_spy: Path) -> None:
    ctx = ProbeContext(target=Me())
    readings: list[dict[str, Any]] = []

    def on_reading(reading: dict[str, Any]) -> None:
        readings.append(reading)
        if reading.get("elapsed"):
            started(fake_spy)
            ctx.cancelled.set()

    ctx.on_reading = on_reading
    t0 = time.monotonic()
    m = StackSample().run(ctx, seconds=30)
    assert time.monotonic() - t0 < 20  # not the whole 30 s window
    pids = [int(f.stem) for f in fake_spy.glob("*.pid")]
    assert len(pids) == 2 and not any(running(p) for p in pids)
    assert m.ok and m.values["samples"] == 7  # py-spy writes what it has on SIGINT
    assert readings[0]["probe"] == "stacks.sample" and "sampling pid" in readings[0]["status"]
    assert any("elapsed" in r and r["of"] == 30 for r in readings)


def test_a_sampler_that_ignores_sigint_is_killed(fake_spy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SPY_DEAF", "1")
    monkeypatch.setattr(stack_recording, "STOP_GRACE_S", 0.5)
    ctx = ProbeContext(target=Me())
    timer = threading.Timer(1.0, ctx.cancelled.set)
    timer.start()
    try:
        m = StackSample().run(ctx, seconds=30)
    finally:
        timer.cancel()
    pids = [int(f.stem) for f in fake_spy.glob("*.pid")]
    assert len(pids) == 2 and not any(running(p) for p in pids)
    assert not m.ok  # killed before writing anything: a reason, not zeros


def test_a_window_of_part_seconds_ends_on_time_and_keeps_what_was_sampled(fake_spy: Path) -> None:
    """py-spy counts whole seconds: a 1.5 s window is cut at 1.5 s (SIGINT), not run to 2 s or
    to the fake's 60."""
    started_at = time.monotonic()
    m = StackSample().run(ProbeContext(target=Me()), seconds=1.5)  # type: ignore[arg-type]
    assert time.monotonic() - started_at < 5
    assert m.ok and m.values["samples"] == 7, m.unavailable


def test_a_pooled_window_adds_its_samples_to_the_earlier_ones(fake_spy: Path) -> None:
    first = StackSample().run(ProbeContext(target=Me()), seconds=1.5)  # type: ignore[arg-type]
    assert first.ok and isinstance(first.pool, stacks.PooledTexts) and first.pool.seconds == 1.5
    pooled = StackSample().run(ProbeContext(target=Me(), pool_with=first), seconds=1.5,  # type: ignore[arg-type]
                               pooled=1)
    assert pooled.ok and pooled.values["samples"] == 14
    assert "2 windows pooled, 3 s of samples in all" in pooled.provenance
    assert pooled.pool.seconds == 3.0
    # Asked to pool with nothing (no earlier window cached): one fresh window as long as both.
    started_at = time.monotonic()
    alone = StackSample().run(ProbeContext(target=Me()), seconds=0.6, pooled=1)  # type: ignore[arg-type]
    assert alone.ok and alone.values["samples"] == 7 and "pooled" not in alone.provenance
    assert time.monotonic() - started_at >= 1.0


def test_the_runner_hands_a_pooled_run_the_window_before_it(temp_probes) -> None:
    from fieldguide.measurement import Measurement
    from fieldguide.probes.base import Probe
    from fieldguide.walk.runner import ProbeRunner

    seen: list[object] = []

    class Pooling(Probe):
        id = "test.pooling"
        title = "a pooling probe"
        params = {"seconds": 1.0}
        pools = True
        values = {"n": ""}

        def run(self, ctx: ProbeContext, seconds: float = 1.0, pooled: int = 0) -> Measurement:
            seen.append(ctx.pool_with.pool if ctx.pool_with is not None else None)
            m = self.measurement(values={"n": pooled})
            m.pool = f"window {pooled}"
            return m

    temp_probes(Pooling)
    runner = ProbeRunner(Me(), budget=100.0)
    runner.measure_probe("test.pooling", {})
    runner.measure_probe("test.pooling", {"pooled": 1})
    runner.measure_probe("test.pooling", {"pooled": 2})
    runner.measure_probe("test.pooling", {"pooled": 1})  # cached: the same pooled window again
    assert seen == [None, "window 0", "window 1"]
