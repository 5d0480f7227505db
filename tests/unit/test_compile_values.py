"""What the compile agent's records are read as, on records shaped like torch 2.13's.

The rows below copy the fields dynamo's compilation metrics gave for real jobs on this box: a
forward with a `print` (a break, a resume function at the break's line, a recompile when the
batch grew) and a Linear compiled with dynamic=False past a recompile limit of 3.
"""

from __future__ import annotations

import pytest

from fieldguide.probes.compile_records import (
    break_rows,
    cache_counts,
    caches_disabled,
    compile_seconds,
    frame_of,
    frames_from,
    phases,
    recompile_rows,
    steady_step_ms,
    timeline,
)

PRINT_REASON = ("Failed to trace builtin operator\n  Explanation: Dynamo does not know how to trace builtin operator "
                "`print` with argument types ['str', 'Tensor'] (has_kwargs False)")


def fwd(compile_id: str, name: str | None, line: int | None, *, seconds: float = 1.0, backend: float = 0.8,
        inductor: float = 0.6, **extra: object) -> dict[str, object]:
    return {"compile_id": compile_id, "co_name": name, "co_filename": "/home/u/train.py" if name else None,
            "co_firstlineno": line, "is_forward": True, "entire_frame_compile_time_s": seconds,
            "backend_compile_time_s": backend, "inductor_compile_time_s": inductor, "duration_us": int(seconds * 1e6),
            "inductor_fx_local_cache_miss_count": 1, "restart_reasons": [], **extra}


def bwd(compile_id: str, seconds: float = 0.8, inductor: float = 0.7) -> dict[str, object]:
    return {"compile_id": compile_id, "co_name": None, "is_forward": False, "inductor_compile_time_s": inductor,
            "duration_us": int(seconds * 1e6), "inductor_fx_local_cache_hit_count": 1, "restart_reasons": []}


PRINT_JOB = [
    fwd("0/0", "forward", 20, seconds=19.5, backend=19.2, inductor=18.4, restart_reasons=[PRINT_REASON]),
    fwd("1/0", "torch_dynamo_resume_in_forward_at_22", 22, seconds=0.17, backend=0.12, inductor=0.05),
    bwd("1/0"), bwd("0/0"),
    fwd("0/1", "forward", 20, seconds=1.8, restart_reasons=[PRINT_REASON],
        recompile_reason="0/0: tensor 'x' size mismatch at index 0. expected 8, actual 9"),
    fwd("1/1", "torch_dynamo_resume_in_forward_at_22", 22,
        recompile_reason="1/0: tensor 'h' size mismatch at index 0. expected 8, actual 9"),
]

LIMIT = ("Dynamo recompile limit exceeded\n  Explanation: Dynamo attempted to recompile the code object too many "
         "times, exceeding the recompile_limit cache size limit (currently set to 3).")
LIMIT_JOB = [
    fwd("0/0", "inner", 67), bwd("0/0"),
    fwd("0/1", "inner", 67, recompile_reason="0/0: tensor 'args[0]' size mismatch at index 0. expected 4, actual 5"),
    fwd("0/2", "inner", 67, recompile_reason="0/1: tensor 'args[0]' size mismatch at index 0. expected 5, actual 6"),
    {"compile_id": "0/3", "co_name": None, "is_forward": None, "fail_type": "Unsupported", "fail_reason": LIMIT,
     "recompile_reason": "0/2: tensor 'args[0]' size mismatch at index 0. expected 6, actual 7",
     "duration_us": 3016, "restart_reasons": []},
]


def test_compile_ids_name_the_frame_and_its_attempt() -> None:
    assert frame_of("3/1") == "3"
    assert frame_of("!0/3/1") == "3"  # compiled autograd's prefix


def test_a_break_is_found_at_the_users_line_with_its_reason() -> None:
    frames = frames_from(PRINT_JOB)
    rows = break_rows(frames, None, 0)
    assert [(r["where"], r["function"]) for r in rows] == [("train.py:22", "forward")]
    assert rows[0]["reason"] == "Failed to trace builtin operator"
    assert rows[0]["per_step"] is None  # no profile: how often it runs is not known


def test_breaks_per_step_come_from_the_compiled_regions_each_step_ran() -> None:
    frames = frames_from(PRINT_JOB)
    # 5 profiled steps: the forward's graph and the resume function's graph ran once each per step.
    hot = break_rows(frames, {"0/1": 5, "1/1": 5}, 5)
    assert hot[0]["per_step"] == 1.0
    # A break in code the steps never reach runs 0 times per step: a one-off.
    once = break_rows(frames, {"0/1": 5}, 5)
    assert once[0]["per_step"] == 0.0


def test_a_branch_on_a_tensor_resuming_in_two_functions_is_one_break() -> None:
    frames = frames_from([fwd("0/0", "forward", 13),
                          fwd("1/0", "torch_dynamo_resume_in_forward_at_16", 16),
                          fwd("2/0", "torch_dynamo_resume_in_forward_at_16", 16)])
    rows = break_rows(frames, {"0/0": 5, "1/0": 3, "2/0": 2}, 5)
    assert rows == [{"where": "train.py:16", "function": "forward", "reason": None, "per_step": 1.0}]


def test_recompiles_count_attempts_after_the_first_and_the_limit_is_seen() -> None:
    frames = frames_from(LIMIT_JOB)
    frame = frames["0"]
    assert frame.recompiles == 3 and frame.compiles == 3
    assert frame.limit_hit
    rows = recompile_rows(frames)
    assert rows[0]["reason"] == "0/2: tensor 'args[0]' size mismatch at index 0. expected 6, actual 7"
    assert not frames_from(PRINT_JOB)["0"].limit_hit
    assert frames_from(PRINT_JOB)["0"].recompiles == 1  # one recompile to dynamic shapes


def test_compile_time_by_phase_adds_the_backward() -> None:
    split = phases([fwd("0/0", "f", 1, seconds=10.0, backend=8.0, inductor=6.0), bwd("0/0", seconds=2.0, inductor=1.5)])
    assert split == {"dynamo_s": 2.0, "aot_s": 2.5, "inductor_s": 7.5}


def test_cache_hits_and_misses_and_disabled_caches() -> None:
    assert cache_counts(PRINT_JOB) == {"cache_hits": 2, "cache_misses": 4}
    assert caches_disabled({"force_disable_caches": True})
    assert caches_disabled({"fx_graph_cache": False})
    assert not caches_disabled({"fx_graph_cache": True, "force_disable_caches": False})
    assert not caches_disabled({})


def test_compile_seconds_prefer_the_callbacks_spans() -> None:
    compiles = [{"t_start": 1.0, "t_end": 16.0}, {"t_start": 20.0, "t_end": 21.5}]
    assert compile_seconds(compiles, PRINT_JOB) == pytest.approx(16.5)
    assert compile_seconds([], [fwd("0/0", "f", 1, seconds=2.0), bwd("0/0", seconds=1.0)]) == pytest.approx(3.0)


def test_the_timeline_finds_the_first_step_and_steady_state() -> None:
    # Agent start at t=100; compiles end at 118; steps of 0.1 s from 118.1 on.
    steps = [[118.0 + 0.1 * i, 0.1 if i else 17.5] for i in range(1, 40)]
    steps[0] = [118.1, 17.9]  # the first step holds the compile
    line = timeline(100.0, 122.0, steps, 0, [{"t_start": 100.2, "t_end": 118.0}], 17.8)
    assert line.first_step_s == pytest.approx(18.1)
    assert line.steady_from_step == 2
    assert line.run_s == pytest.approx(22.0) and line.train_s == pytest.approx(4.2)
    assert steady_step_ms(steps, 118.0) == pytest.approx(100.0)
    # Rows that do not start at the job's first step cannot say when it came.
    assert timeline(100.0, 122.0, steps, 50, [], 0.0).first_step_s is None
