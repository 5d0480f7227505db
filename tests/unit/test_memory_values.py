"""The oom playbook's arithmetic on constructed data: growth fits, breakdown shares, limits,
CUDA allocator stats, NVML process lists, OOM messages, and who keeps a tensor alive."""

from __future__ import annotations

import gc
import random
import sys
from typing import Any

import pytest

from fieldguide.agent.inside import memread
from fieldguide.playbook import find_playbook
from fieldguide.probes.memory import breakdown_values, fragmentation_values, growth_values
from fieldguide.probes.memory_math import MB, growth, shares, sustained_rate, tightest
from fieldguide.probes.memory_outside import gpu_others


def test_a_steady_climb_is_sustained_growth_with_its_slope() -> None:
    steps = [float(i) for i in range(300)]
    used = [400 * MB + 512 * 1024 * i + random.Random(i).uniform(-2, 2) * MB for i in range(300)]
    g = growth(steps, used)
    assert g is not None and g.sustained and g.r2 > 0.95
    assert sustained_rate(g) == pytest.approx(512 * 1024, rel=0.05)


def test_one_late_jump_or_noise_is_not_sustained() -> None:
    steps = [float(i) for i in range(300)]
    jump = [400 * MB + (200 * MB if i > 280 else 0) for i in range(300)]  # one allocation near the end
    noise = [400 * MB + random.Random(i).uniform(-5, 5) * MB for i in range(300)]
    for series in (jump, noise):
        assert sustained_rate(growth(steps, series)) == 0.0
    assert growth(steps[:5], jump[:5]) is None  # too few points to say


def watch_reply(rows: int, added: int, nodes: tuple[int, int] = (13, 13), grow_bytes: int = 0) -> dict[str, Any]:
    return {"rows": [[100 + i, 1000.0 + 0.02 * i, 300 * MB + grow_bytes * i, 900 * MB, None, None]
                     for i in range(rows)],
            "census": [{"tensors": 29, "bytes": 20 * MB, "graph_nodes": nodes[0]},
                       {"tensors": 29 + added, "bytes": 20 * MB + added * 512 * 1024, "graph_nodes": nodes[1]}],
            "growing": [{"what": "128x1024 float32 on cpu holding its autograd graph", "added": added,
                         "added_bytes": added * 512 * 1024, "count": added}] if added else [],
            "kept_by": {"growing": "a list of 300 items kept by Net.seen"} if added else {}}


def test_growth_values_name_what_grows_and_who_keeps_it() -> None:
    values, missing, _ = growth_values(watch_reply(300, added=299, grow_bytes=512 * 1024))
    assert not missing
    assert values["tensors_kept_per_step"] == pytest.approx(1.0)
    assert values["tensor_growth_mb_per_min"] == pytest.approx(299 * 0.5 / (299 * 0.02 / 60), rel=0.01)
    assert "299 x 128x1024 float32" in values["what_grows"] and values["kept_by"].endswith("Net.seen")
    assert values["growth_kb_per_step"] == pytest.approx(512, rel=0.01)


def test_a_graph_kept_across_steps_is_growth_even_with_no_new_python_tensor() -> None:
    values, _, _ = growth_values(watch_reply(200, added=0, nodes=(13, 13 + 4 * 199)))
    assert values["tensors_kept_per_step"] == 0.0
    assert values["graph_nodes_kept_per_step"] == pytest.approx(4.0)
    assert "autograd graph" in values["what_grows"]


def test_flat_memory_is_no_growth_and_a_window_without_census_says_why() -> None:
    values, missing, _ = growth_values(watch_reply(200, added=0))
    assert values["tensors_kept_per_step"] == 0 and values["growth_mb_per_min"] == 0
    reply = watch_reply(200, added=0)
    del reply["census"]
    _, missing, _ = growth_values(reply)
    assert "no second tensor census" in missing["tensors_kept_per_step"]


def test_batches_of_changing_size_between_two_censuses_are_not_growth() -> None:
    """A real GPU job with a batch of random size each step: its two censuses differed by a batch
    (+120 MB in 8 s read as 900 MB/min) while memory at the boundaries went up and down. The
    tensors kept across steps (by identity, checkpoints over the window) leave the batch in
    flight out: no growth, and a margin from their own scatter that is small."""
    rng = random.Random(3)
    reply = watch_reply(400, added=0)
    for row in reply["rows"]:
        row[2] = 300 * MB + rng.randint(1, 64) * 4 * MB  # the live batch at each boundary
    reply["census"][1]["bytes"] += 120 * MB
    reply["kept"] = [[1000.0 + 1.33 * i, 100 + 66 * i, 0, 0] for i in range(6)]
    values, _, margins = growth_values(reply)
    assert values["census_growth_mb_per_min"] > 100
    assert values["tensor_growth_mb_per_min"] == 0.0 and margins["tensor_growth_mb_per_min"] == 0.0


def test_two_censuses_alone_are_growth_with_a_margin_as_large_as_the_reading() -> None:
    """Without checkpoints (a window too short for them) the two censuses' difference may be one
    batch or a leak: it is read, with itself as its margin, so the walk measures again."""
    reply = watch_reply(400, added=0)
    reply["census"][1]["bytes"] += 120 * MB
    values, _, margins = growth_values(reply)
    assert values["tensor_growth_mb_per_min"] > 100
    assert margins["tensor_growth_mb_per_min"] == values["tensor_growth_mb_per_min"]


@pytest.mark.parametrize(("fragmented", "retries", "departs"), [
    (0.091, 3, False),  # an OOM from an activations peak: retries with the pool nearly all in use
    (0.3, 3, True),     # retries while a third of the pool sits unused in pieces
    (0.6, 0, True),     # most of the pool unused
    (0.1, 0, False),
])
def test_retries_are_fragmentation_only_with_an_unused_pool(fragmented: float, retries: int, departs: bool) -> None:
    node = find_playbook("oom").nodes["memory.fragmentation"]
    expectation = next(o for o in node.measure if o.probe == "memory.fragmentation").expect
    assert expectation.holds({"fragmented_fraction": fragmented, "alloc_retries": retries}) is not departs


def test_shares_count_gradients_with_parameters_and_name_the_largest() -> None:
    share, dominant = shares({"parameters": 10, "gradients": 10, "optimizer_state": 40, "activations": 30,
                              "other_tensors": 10})
    assert dominant == "optimizer_state" and share["parameters"] == pytest.approx(0.2)
    assert shares({}) == ({}, None)


def test_the_tightest_limit_is_the_one_its_own_use_comes_closest_to() -> None:
    limits = [{"kind": "RLIMIT_AS", "limit": 2000, "used": 1500, "peak": 1900},
              {"kind": "available RAM", "limit": 24000, "used": 1000, "peak": 1300}]
    assert tightest(limits)["kind"] == "RLIMIT_AS"
    assert tightest([]) is None


def test_breakdown_at_an_oom_names_activations_and_the_failed_request() -> None:
    b = {"at": "oom", "parameters": 78_096, "gradients": 0, "optimizer_state": 0, "activations": 660 * MB,
         "other_tensors": 8, "requested": 192 * MB, "cuda": None,
         "limits": [{"kind": "RLIMIT_AS", "limit": 1800 * MB, "used": 1500 * MB, "peak": 1760 * MB}]}
    values = breakdown_values(b)
    assert values["oom"] is True and values["dominant"] == "activations"
    assert values["activations_share"] > 0.99 and values["requested_mb"] == 192.0
    assert values["limit"] == "RLIMIT_AS" and values["peak_fraction_of_limit"] == pytest.approx(0.978, abs=0.001)


def test_on_cuda_the_device_total_is_the_limit() -> None:
    cuda = {"total": 80 * 1024 * MB, "reserved_peak": 78 * 1024 * MB, "allocated_peak": 30 * 1024 * MB,
            "device": 0, "reserved": 70 * 1024 * MB, "allocated": 20 * 1024 * MB, "inactive_split": 9 * 1024 * MB,
            "alloc_retries": 12, "ooms": 1}
    values = breakdown_values({"at": "step", "parameters": MB, "activations": 2 * MB, "cuda": cuda, "limits": []})
    assert values["limit"] == "GPU 0 memory" and values["peak_fraction_of_limit"] == pytest.approx(0.975)
    frag = fragmentation_values(cuda)
    assert frag["fragmented_fraction"] == pytest.approx(48 / 78, abs=0.001)
    assert frag["alloc_retries"] == 12 and frag["inactive_split_mb"] == 9 * 1024


def test_other_processes_on_the_jobs_gpu_are_named_and_other_gpus_ignored() -> None:
    devices = [
        {"index": 0, "memory_total_mb": 81920, "processes": [{"pid": 10, "used_mb": 30000},
                                                             {"pid": 99, "used_mb": 40000}]},
        {"index": 1, "memory_total_mb": 81920, "processes": [{"pid": 77, "used_mb": 80000}]},
    ]
    found = gpu_others(devices, {10, 11}, {99: "ana: python serve.py"})
    assert found is not None and found["gpu"] == 0
    assert found["others_mb"] == 40000 and found["others_fraction_of_total"] == pytest.approx(0.488, abs=0.001)
    assert found["others"][0]["command"] == "ana: python serve.py"
    assert gpu_others(devices, {12}) is None  # a job that holds no GPU memory


@pytest.mark.parametrize(("message", "size"), [
    ("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate "
     "201326592 bytes. Error code 12 (Cannot allocate memory)", 201326592),
    ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB", 2 * 1024 * MB),
    ("something else", None),
])
def test_the_failed_request_size_is_read_from_either_allocator(message: str, size: int | None) -> None:
    assert memread.requested_bytes(message) == size


def test_out_of_memory_errors_are_told_from_other_errors() -> None:
    assert memread.is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"))
    assert memread.is_oom(MemoryError())
    assert not memread.is_oom(RuntimeError("shape mismatch"))
    assert not memread.is_oom(ValueError("out of memory"))  # not an allocator's error type


class Net:
    def __init__(self) -> None:
        self.seen: list[object] = []


def test_the_holder_of_a_kept_object_is_named_through_its_container() -> None:
    class Thing:
        pass

    net = Net()
    kept = Thing()
    net.seen.append(kept)
    assert memread.holder(kept, set()) == "a list of 1 items kept by Net.seen"
    del net
    gc.collect()


def a_loop_that_keeps_its_losses(frames: list[Any]) -> None:
    kept = []
    for _ in range(3):
        loss = object()
        kept.append(loss)  # the line a leak must point at
        frames.append(sys._getframe())
    assert kept


def test_a_local_that_grows_is_named_with_the_line_that_adds_to_it() -> None:
    """Not the line the frame stands at when the census runs (once `scaler.step`'s line)."""
    import inspect

    frames: list[Any] = []
    a_loop_that_keeps_its_losses(frames)
    frame = frames[-1]
    kept = frame.f_locals["kept"]
    lines, first = inspect.getsourcelines(a_loop_that_keeps_its_losses)
    append_line = first + next(i for i, text in enumerate(lines) if "kept.append" in text)
    assert memread.holder(kept[0], set(), frames=[frame]) == (
        f"a list of 3 items kept by kept, a local of a_loop_that_keeps_its_losses (test_memory_values.py:{append_line})")
    assert memread.growth_site(frame.f_code, "nothing_like_it") is None


def test_limits_of_this_process_include_the_available_ram() -> None:
    kinds = {limit["kind"] for limit in memread.host_limits()}
    assert "available RAM" in kinds
    for limit in memread.host_limits():
        assert limit["limit"] > 0 and limit["peak"] >= 0


def test_the_oom_playbook_reaches_every_memory_cause_and_a_healthy_leaf() -> None:
    playbook = find_playbook("oom")
    reachable = {edge.target for node in playbook.nodes.values() for edge in (node.on_pass, node.on_depart)
                 if edge.kind == "cause"}
    assert {"memory.leak_across_steps", "memory.fragmentation", "memory.activations", "memory.optimizer_state",
            "memory.other_process"} <= reachable
    assert "memory.fits" in playbook.leaves and playbook.arm == ("memory",)


class FakeNvml:
    """NVML as the sampler uses it: one GPU on which the job's process holds more each call."""

    class NVMLError(Exception):
        pass

    def __init__(self, pid: int) -> None:
        self.pid, self.calls, self.shut = pid, 0, False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        from types import SimpleNamespace

        self.calls += 1
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=(1000 + 64 * self.calls) * MB),
                SimpleNamespace(pid=1, usedGpuMemory=5000 * MB)]


def test_the_jobs_gpu_memory_is_sampled_once_a_second_and_its_growth_fitted() -> None:
    import os

    from fieldguide.probes.memory_outside import GpuSampler

    nvml = FakeNvml(os.getpid())
    sampler = GpuSampler(os.getpid(), module=nvml)
    for second in range(20):
        sampler.sample(100.0 + second)
        sampler.sample(100.5 + second)  # within the second: not sampled again
    sampler.close()
    assert nvml.calls == 20 and nvml.shut
    assert sampler.used[0] == 1064 * MB  # the job's process only, not pid 1's
    assert sustained_rate(growth(sampler.ts, sampler.used)) == pytest.approx(64 * MB)


def test_noise_that_happens_to_rise_in_thirds_is_not_a_leak() -> None:
    # Allocator noise of +-5 MB whose thirds' medians rise by a fraction of it: no trend a line explains.
    rng = random.Random(7)
    series = [330 * MB + (i // 16) * MB // 2 + rng.uniform(-5, 5) * MB for i in range(48)]
    g = growth([float(i) for i in range(48)], series)
    from statistics import median

    thirds = [median(series[i:i + 16]) for i in (0, 16, 32)]
    assert thirds[0] < thirds[1] < thirds[2], "the case this test is about: rising medians by chance"
    assert g is not None and g.r2 < 0.5
    assert sustained_rate(g) == 0.0


def test_the_floor_of_each_second_drops_the_spikes_of_temporaries() -> None:
    from fieldguide.probes.memory_math import floors

    ts = [i * 0.2 for i in range(50)]  # 5 Hz for 10 s
    leak = [300 * MB + 1 * MB * t + (40 * MB if i % 3 == 0 else 0) for i, t in enumerate(ts)]
    bins_t, bins_y = floors(ts, leak)
    assert len(bins_t) == 10 and all(y < 300 * MB + 11 * MB for y in bins_y)  # no spike survives
    g = growth(bins_t, bins_y)
    assert g is not None and g.r2 > 0.95 and sustained_rate(g) == pytest.approx(MB, rel=0.1)


# --- the outside growth reading's margin: an unevenly growing leak is not called flat --------------

def test_a_flat_floor_has_no_margin_and_a_steady_leak_a_small_one() -> None:
    from fieldguide.probes.memory_math import growth_margin

    ts = [float(t) for t in range(10)]
    flat = growth(ts, [500.0 * MB] * 10)
    assert flat is not None and sustained_rate(flat) == 0.0 and growth_margin(flat) == 0.0
    steady = growth(ts, [500.0 * MB + t * 2 * MB + (0.1 * MB if t % 2 else 0.0) for t in range(10)])
    assert steady is not None and steady.sustained
    assert 0.0 < growth_margin(steady) < 0.2 * steady.slope


def test_a_leak_starved_for_part_of_its_window_reads_zero_but_with_a_margin_past_the_threshold() -> None:
    """A leak whose job got no CPU for most of a 10 s window on a busy box: its floor
    climbs, stalls, climbs; the thirds are not strictly rising, so the reading is 0. Its margin
    reaches past the playbook's 10 MB/min, so the node measures again rather than passing."""
    from fieldguide.probes.memory_math import growth_margin

    ts = [float(t) for t in range(10)]
    # 1.6 MB in its first second, nothing for six, then 0.8 MB a second: the first two thirds' medians tie.
    climb = [0.0, 1.6, 1.6, 1.6, 1.6, 1.6, 1.6, 1.6, 2.4, 3.2]
    stalled = growth(ts, [500.0 * MB + c * MB for c in climb])
    assert stalled is not None and sustained_rate(stalled) == 0.0
    assert growth_margin(stalled) * 60 / MB > 10.0


def test_the_engine_measures_a_zero_growth_with_a_wide_margin_again() -> None:
    from fieldguide.measurement import Measurement
    from fieldguide.walk.engine import Walk

    playbook = find_playbook("oom")
    windows = []

    def measure(option: Any) -> Measurement:
        if option.probe != "memory.growth.outside":
            return Measurement.cannot(option.probe, "not here")
        windows.append(option.params.get("seconds"))
        if len(windows) == 1:
            return Measurement(probe=option.probe, values={"growth_mb_per_min": 0.0},
                               margins={"growth_mb_per_min": 30.0})
        return Measurement(probe=option.probe, values={"growth_mb_per_min": 24.0},
                           margins={"growth_mb_per_min": 3.0})

    walk = Walk(playbook, lambda: {"process"}, measure)
    result = walk.run_node("memory.growth")
    assert result.status == "depart" and windows == [None, 20.0], (result, windows)


def test_a_healthy_floor_that_wobbles_is_not_too_close_to_call() -> None:
    """oom_fits attached beside a busy core, 20 s of 1 s floors: the allocator returns ~5 MB and
    takes it again (slope −7 MB/min ± 4.9). Its upper bound is below 10 MB/min: judged flat."""
    from fieldguide.probes.memory_math import growth_margin

    wobble = [0.0, -2.56, -2.07, 0.0, -1.23, 0.0, -4.88, -4.88, 0.01, -4.88, -4.87, 0.01, -4.87, -2.75, 0.02,
              0.02, -4.86, -0.89, -4.86, -4.86]
    g = growth([float(t) for t in range(20)], [900.0 * MB + w * MB for w in wobble])
    assert g is not None and sustained_rate(g) == 0.0
    assert growth_margin(g) * 60 / MB < 5.0


@pytest.mark.parametrize(("breakdown", "armed", "says"), [
    ({"cuda": False}, False, "host memory"),
    ({"cuda": True}, False, "--memory-history"),
    ({"cuda": True}, True, "could not be written"),
])
def test_the_missing_snapshot_says_why_and_how_to_get_one(breakdown: dict, armed: bool, says: str) -> None:
    from fieldguide.probes.memory import no_snapshot_why

    assert says in no_snapshot_why(breakdown, armed)
