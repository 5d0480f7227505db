"""`fieldguide timing`'s table, built from constructed marks, step rows and device_time replies."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from fieldguide.experiments.timing import (
    Timing,
    device_window,
    first_forward,
    first_step_ms,
    naive_ms,
    reading,
    render,
    rows,
    step_ends,
    warm_steps,
    warmed,
)

START = 100.0


def cpu_ends(steps: int = 400) -> list[float]:
    """Step 1 takes 500 ms from the first forward, steps 2-5 take 30 ms, then 10 ms each."""
    ends = [START + 0.5]
    for n in range(2, steps + 1):
        ends.append(ends[-1] + (0.030 if n <= 5 else 0.010))
    return ends


def table(t: Timing) -> dict[str, tuple[str, str]]:
    return {what: (value, note) for what, value, note in rows(t)}


def shown(t: Timing) -> str:
    out = io.StringIO()
    Console(width=80, file=out, color_system=None).print(render(t))
    return out.getvalue()


def test_step_ends_start_at_the_defining_signals_first_boundary() -> None:
    # The first backward is a boundary until the first optimizer step; the rows restart there.
    signals: list[dict[str, Any]] = [{"boundary": "k", "t": 1.0}, {"boundary": "o", "t": 2.0}, {"outer_modules": ["Net"]}]
    row = [0.0, 0.0, 0.0, "o", None, 0.0, 0.0, 1, 0, 1, 0.0]
    rows_in = [[1.5, *row[1:3], "k", *row[4:]], [3.0, *row[1:]], [4.0, *row[1:]]]
    assert step_ends(signals, rows_in) == ([2.0, 3.0, 4.0], True)
    assert step_ends([], rows_in[1:]) == ([3.0, 4.0], False)


def test_first_forward_from_the_coldstart_marks() -> None:
    marks: list[dict[str, Any]] = [{"mark": "interpreter", "t": 1.0}, {"mark": "first_forward", "t": 5.5}, {"step": 1, "t": 6.0}]
    assert first_forward(marks) == 5.5
    assert first_forward([{"mark": "interpreter", "t": 1.0}]) is None


def test_cpu_table_naive_timers_against_the_warmed_median() -> None:
    t = Timing(ends=cpu_ends(), first_forward=START, steps_wanted=400, no_device="the job has not initialised CUDA")
    assert first_step_ms(t) == pytest.approx(500)
    assert naive_ms(t, 20) == pytest.approx((0.5 + 4 * 0.03 + 15 * 0.01) * 1000 / 20)
    assert naive_ms(t, 400) == pytest.approx((0.5 + 4 * 0.03 + 395 * 0.01) * 1000 / 400)
    assert warm_steps(t.ends)[0] == 6
    got = table(t)
    assert got["first step ever"][0] == "500 ms"
    assert got["first step ever"][1] == "50x a warm step"
    assert got["naive timer, first 20 steps"][0] == "38.5 ms/step"
    assert got["naive timer, first 400 steps"][0] == "11.4 ms/step"
    assert got["still queued at the final sync"] == ("0 ms", "no device queue (CPU)")
    value, note = got["synchronized warmed median"]
    assert value == "10.0 ms/step" and "steps 6-400" in note and "host clock" in note
    stats = warmed(t)[0]
    assert stats is not None
    assert reading(t) == (f"the naive 20-step timer reads {(naive_ms(t, 20) or 0) / stats[0]:.1f}x the warmed median: "
                          "it includes the first step's warm-up (500 ms); over 400 steps it reads 1.14x; on CPU there "
                          "is no queue to miss.")
    text = shown(t)
    assert "Each CPU op returns when its work is done, so host time is the real time" in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80


def test_reading_names_slow_steps_after_a_quick_first_step() -> None:
    ends = [START + 0.02]
    for n in range(2, 401):
        ends.append(ends[-1] + (0.050 if n <= 30 else 0.010))
    t = Timing(ends=ends, first_forward=START, steps_wanted=400, no_device="no CUDA")
    assert warm_steps(ends)[0] == 31
    assert "it includes the first step (20.0 ms) and the slower steps before step 31;" in reading(t)


def test_reading_when_the_naive_timer_reads_low() -> None:
    ends = [START + 0.01]
    for n in range(2, 401):
        ends.append(ends[-1] + (0.005 if n <= 50 else 0.010))
    t = Timing(ends=ends, first_forward=START, steps_wanted=400, no_device="no CUDA")
    assert reading(t).startswith("the naive 20-step timer reads 0.52x the warmed median: the early steps ran faster")
    fast_host = device_window(gpu_reply(20, 50.0, 1.0, 900.0))
    assert fast_host is not None
    t.device, t.no_device = [fast_host], ""
    assert "0.10x the warmed median: the host ran ahead of the device" in reading(t)


def test_steps_not_reached_say_why() -> None:
    t = Timing(ends=cpu_ends(150), first_forward=START, steps_wanted=400, short="150 steps in 60 s (--timeout)",
               no_device="no CUDA")
    got = table(t)
    assert got["naive timer, first 100 steps"][0] != "-"
    assert got["naive timer, first 400 steps"] == ("-", "not reached: 150 steps in 60 s (--timeout)")
    asked = Timing(ends=cpu_ends(100), first_forward=START, steps_wanted=100, no_device="no CUDA")
    assert table(asked)["naive timer, first 400 steps"] == ("-", "not timed: --steps 100")


def test_too_few_steps_to_see_warm_up_end_uses_the_later_half() -> None:
    t = Timing(ends=cpu_ends(10), first_forward=START, steps_wanted=400, short="the job ended after 10 steps")
    steady, times = warm_steps(t.ends)
    assert steady is None and len(times) == 5 and times == pytest.approx([10.0] * 5)
    value, note = table(t)["synchronized warmed median"]
    assert value == "10.0 ms/step" and "too few to see warm-up end" in note
    assert table(t)["naive timer, first 20 steps"] == ("-", "not reached: the job ended after 10 steps")
    assert reading(t) == "too few steps to compare a naive timer with warm steps"  # no naive window reached


def test_one_step_is_too_few_for_anything_but_the_first() -> None:
    t = Timing(ends=[START + 0.2], first_forward=START, steps_wanted=400, short="the job ended after 1 steps")
    assert table(t)["first step ever"][0] == "200 ms"
    assert table(t)["synchronized warmed median"] == ("-", "too few steps")
    assert reading(t) == "too few steps to compare a naive timer with warm steps"
    shown(t)  # renders


def test_first_step_missing_times_from_the_first_steps_end() -> None:
    ends = cpu_ends()
    t = Timing(ends=ends, first_forward=None, steps_wanted=400, no_device="no CUDA")
    assert first_step_ms(t) is None
    assert table(t)["first step ever"] == ("-", "not seen: its start came before the agent")
    assert naive_ms(t, 20) == pytest.approx((ends[20] - ends[0]) * 1000 / 20)
    assert naive_ms(t, 400) is None  # step 401's end was never seen
    assert "it includes the slower steps before step 6" in reading(t)
    late = Timing(ends=ends, first_forward=ends[0] + 1, steps_wanted=400)  # a forward after step 1: not its start
    assert first_step_ms(late) is None


def gpu_reply(steps: int, device: float, host: float, queued: float) -> dict[str, object]:
    return {"steps": steps, "device_ms": [device] * (steps - 1) + [device * 2], "host_ms": [host] * steps,
            "queued_ms_at_end": queued}


def test_gpu_table_from_device_time_replies() -> None:
    windows = [device_window(gpu_reply(n, 5.0, 1.0, 400.0)) for n in (20, 100, 400)]
    assert all(w is not None for w in windows)
    t = Timing(ends=cpu_ends(), first_forward=START, steps_wanted=400, device=[w for w in windows if w])
    w20 = t.device[0]
    assert w20.host_ms == 1.0 and w20.synced_ms == pytest.approx(1.0 + 400 / 20)
    got = table(t)
    assert got["naive timer, 20 warm steps"] == ("1.00 ms/step", "synced: 21.0 ms/step")
    assert got["naive timer, 400 warm steps"][1] == "synced: 2.00 ms/step"
    assert got["still queued at the final sync"] == ("400 ms", "launched, not yet run, after 400 warm steps")
    value, note = got["synchronized warmed median"]
    assert value == "5.00 ms/step" and "CUDA events over 400 warm steps" in note and "p10-p90 5.00-5.00" in note
    assert "misses ~400 ms queued" in got["naive timer, first 20 steps"][1]
    assert reading(t).endswith("with no sync at the end, 20 warm steps miss 400 ms still queued (95% of their time).")
    text = shown(t)
    assert "On CPU" not in text and max(len(line) for line in text.splitlines()) <= 80


def test_a_warm_window_that_opens_with_a_full_queue_is_synced_at_the_devices_pace() -> None:
    """What an H200 showed: 100 warm steps of 55.6 ms on the device, the host as fast (it waits
    on a full launch queue), about 1035 ms queued at both ends. Counting the end's queue alone
    had read 108 ms/step "synced" and "48% of their time" missed."""
    reply = dict(gpu_reply(20, 55.6, 56.7, 1035.0), queued_ms_at_start=1030.0)
    w = device_window(reply)
    assert w is not None and w.queued_start_ms == 1030.0
    assert w.synced_ms == pytest.approx(56.7 + 5.0 / 20)
    t = Timing(ends=cpu_ends(), first_forward=START, steps_wanted=400, device=[w])
    assert table(t)["still queued at the final sync"] == (
        "1035 ms", "launched, not yet run, after 20 warm steps; 1030 ms as the window opened")
    assert "keeps the device's pace" in reading(t) and "miss" not in reading(t).split(";")[-1]


def test_device_window_without_events_is_none_and_an_unmeasured_queue_says_so() -> None:
    assert device_window({"steps": 0, "device_ms": [], "host_ms": []}) is None
    t = Timing(ends=cpu_ends(30), first_forward=START, steps_wanted=400,
               device_short="the 20-step window and later were not timed (out of time)")
    assert table(t)["still queued at the final sync"] == (
        "-", "not measured: the 20-step window and later were not timed (out of time)")
    assert warmed(t)[1].startswith("host clock")
