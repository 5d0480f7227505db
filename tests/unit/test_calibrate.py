"""`fieldguide calibrate` on constructed results: the cache, the values, the rendering, and
playbook thresholds that refer to the calibration (with one and without)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fg_fakes import LAUNCH, FakeMeasure
from rich.console import Console

from fieldguide.calibrate import cache, calibrate_command, command
from fieldguide.calibrate.plot import render
from fieldguide.calibrate.results import Calibration, Point, derive, plateau
from fieldguide.errors import FieldguideError
from fieldguide.playbook import find_playbook
from fieldguide.playbook.expect import (
    NO_CALIBRATION,
    Calibrated,
    ExpectationSyntaxError,
    parse_expectation,
)
from fieldguide.walk.engine import DEPART, PASS, Walk, judge

WAITING = {0: 29.0, 1: 28.5, 2: 58.0, 4: 116.0, 8: 230.0}
CPU = {0: 28.0, 1: 27.5, 2: 55.0, 4: 56.0, 8: 52.0}
GPU_POINTS = [Point("gpu.matmul", "fp32", "TFLOP/s", 51.0, 50.2, 51.3, 5),
              Point("gpu.matmul", "tf32", "TFLOP/s", 380.0, 371.0, 384.0, 5),
              Point("gpu.matmul", "bf16", "TFLOP/s", 690.0, 660.0, 701.0, 5),
              Point("gpu.matmul", "fp16", "TFLOP/s", 702.0, 670.0, 710.0, 5),
              Point("gpu.h2d", "pinned", "GB/s", 52.1, 51.0, 53.0, 5),
              Point("gpu.h2d", "pageable", "GB/s", 9.8, 8.1, 11.0, 5),
              Point("gpu.launch", "tiny kernel", "us", 4.6, 4.4, 5.2, 5),
              Point("gpu.sync", "idle stream", "us", 2.1, 2.0, 2.6, 5)]


def points(gpu: bool = False) -> list[Point]:
    out = [Point("cpu.matmul", 512, "GFLOP/s", 40.0, 35.0, 44.0, 5),
           Point("cpu.matmul", 1024, "GFLOP/s", 54.4, 40.6, 75.8, 5),
           Point("cpu.matmul.fp64", 1024, "GFLOP/s", 27.1, 22.0, 30.3, 5)]
    out += [Point("loader.waiting", w, "batches/s", r, r * 0.95, r * 1.02, 5) for w, r in WAITING.items()]
    out += [Point("loader.cpu", w, "batches/s", r, r * 0.8, r * 1.1, 5) for w, r in CPU.items()]
    return out + (GPU_POINTS if gpu else [])


def calibration(gpu: bool = False, host: str = "testhost", torch: str = "2.13.0+cpu",
                created: str = "2026-01-02T03:04:05+00:00") -> Calibration:
    pts = points(gpu)
    values, missing = derive(pts, {} if gpu else {"gpu": "no CUDA device"})
    return Calibration(host=host, torch=torch, device="NVIDIA H200" if gpu else "cpu", created=created,
                       elapsed_s=31.2, points=pts, values=values, missing=missing,
                       identity={"cores": 2, "quick": False, "sample_ms": 4.0, "batch": 8})


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(cache, "host", lambda: "testhost")
    return tmp_path / "fieldguide"


def rendered(cal: Calibration) -> str:
    out = io.StringIO()
    Console(width=80, file=out, color_system=None).print(render(cal))
    return out.getvalue()


# -- the cache ------------------------------------------------------------------------------------

def test_the_cache_honours_xdg_cache_home_and_ignores_a_relative_one(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "fieldguide"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
    assert cache.cache_dir() == Path.home() / ".cache" / "fieldguide"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache.cache_dir() == Path.home() / ".cache" / "fieldguide"


def test_the_key_is_host_torch_and_device_made_safe_for_a_file_name() -> None:
    key = cache.key("gpu-node/07", "2.13.0+cu128", "NVIDIA H200")
    assert key == "calibration-gpu-node-07--torch-2.13.0+cu128--nvidia-h200.json"
    assert cache.key("a", "2.13.0", "cpu") != cache.key("a", "2.12.0", "cpu") != cache.key("b", "2.13.0", "cpu")


def test_a_written_calibration_reads_back_the_same(xdg: Path) -> None:
    cal = calibration(gpu=True)
    path = cache.write(cal)
    assert path.parent == xdg and path.name == cache.key("testhost", "2.13.0+cpu", "NVIDIA H200")
    data = json.loads(path.read_text())
    assert {"host", "torch", "device", "created", "elapsed_s", "values", "missing", "points"} <= set(data)
    back = cache.read(path)
    assert back.values == cal.values and back.points == cal.points and back.missing == cal.missing


def test_this_machines_calibration_prefers_the_same_torch_else_the_newest(xdg: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert cache.for_this_machine() is None
    cache.write(calibration(torch="2.12.0", created="2026-01-01T00:00:00+00:00"))
    cache.write(calibration(torch="2.13.0", created="2026-02-01T00:00:00+00:00"))
    cache.write(calibration(host="otherhost", torch="2.14.0", created="2026-03-01T00:00:00+00:00"))
    (xdg / cache.key("testhost", "9", "cpu")).write_text("{not json")  # passed over, not fatal
    monkeypatch.setattr(cache, "_installed_torch", lambda: "2.12.0")
    found = cache.for_this_machine()
    assert found is not None and found.torch == "2.12.0"
    monkeypatch.setattr(cache, "_installed_torch", lambda: None)
    found = cache.for_this_machine()
    assert found is not None and found.torch == "2.13.0"  # the newest of this host, never another host's


def test_an_unreadable_or_foreign_file_is_a_reason(tmp_path: Path) -> None:
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"schema": 99}))
    with pytest.raises(ValueError, match="not a calibration"):
        cache.read(bad)


# -- the values ----------------------------------------------------------------------------------

def test_derived_values_waiting_scales_and_cpu_work_plateaus() -> None:
    values, missing = derive(points(), {"gpu": "no CUDA device"})
    assert values["waiting_scaling_8"] == pytest.approx(230 / 29)
    assert values["cpu_plateau_workers"] == 2
    assert values["cpu_matmul_gflops"] == 54.4
    assert values["gpu_launch_us"] is None and missing["gpu_launch_us"] == "no CUDA device"
    assert set(missing) == {n for n in values if n.startswith("gpu_")}


def test_the_plateau_is_the_fewest_workers_within_15_percent_of_the_best() -> None:
    series = [Point("loader.cpu", w, "b/s", r, r, r) for w, r in {0: 12.6, 1: 12.5, 2: 16.5, 4: 21.3, 8: 20.0}.items()]
    assert plateau(series) == 4  # 16.5 is more than 15% under 21.3
    still_scaling = [Point("loader.waiting", w, "b/s", r, r, r) for w, r in WAITING.items()]
    assert plateau(still_scaling) == 8
    assert plateau([]) is None


def test_gpu_results_give_their_values() -> None:
    values, missing = derive(points(gpu=True), {})
    assert values["gpu_matmul_tflops_bf16"] == 690.0 and values["gpu_matmul_tflops_tf32"] == 380.0
    assert values["gpu_h2d_pinned_gbs"] == 52.1 and values["gpu_h2d_pageable_gbs"] == 9.8
    assert values["gpu_launch_us"] == 4.6 and values["gpu_sync_us"] == 2.1
    assert missing == {}


def test_a_gpu_value_the_bench_did_not_reach_is_not_measured_not_invented() -> None:
    values, missing = derive([p for p in points(gpu=True) if p.series != "gpu.sync"], {})
    assert values["gpu_sync_us"] is None and missing["gpu_sync_us"] == "not measured"


def test_bench_records_become_a_calibration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "host", lambda: "testhost")
    records: list[dict[str, Any]] = [
        {"kind": "identity", "torch": "2.13.0+cpu", "device": "cpu", "cuda": False, "cores": 2, "quick": True},
        *({"kind": "series", **p.to_json()} for p in points()),
        {"kind": "not_measured", "group": "gpu", "reason": "no CUDA device"}, {"kind": "done"}]
    cal = command.from_records(records, elapsed=12.5)
    assert cal.host == "testhost" and cal.device == "cpu" and cal.identity["quick"] is True
    assert cal.values["cpu_plateau_workers"] == 2 and cal.missing["gpu_sync_us"] == "no CUDA device"
    line = command.progress_line(next(r for r in records if r.get("series") == "loader.waiting" and r.get("x") == 8))
    assert line is not None and "DataLoader, waiting" in line and "8 workers" in line and "batches/s" in line


# -- rendering ------------------------------------------------------------------------------------

def test_rendering_fits_80_columns_and_shows_both_pipelines_side_by_side() -> None:
    text = rendered(calibration())
    assert max(len(line) for line in text.splitlines()) <= 80
    row = next(line for line in text.splitlines() if line.strip().startswith("8 ") and "│" in line)
    waiting, cpu = row.split("│")
    assert "230 (218–235)" in waiting and "52.0 (41.6–57.2)" in cpu
    assert waiting.count("█") > 3 * cpu.count("█")  # one scale for both series
    assert "GPU: not measured (no CUDA device)" in text
    assert "not measured (no CUDA device): the 8 gpu_* values" in text


def test_rendering_gpu_results() -> None:
    text = rendered(calibration(gpu=True))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "GPU matmul 4096x4096, TFLOP/s by dtype" in text
    assert "bf16" in text and "690 (660–701)" in text
    assert "host→device copy" in text and "52.1" in text and "4.60" in text
    assert "not measured" not in text


# -- the command (the bench replaced by its records) ------------------------------------------

def test_show_without_a_calibration_is_one_line_and_exit_2(xdg: Path) -> None:
    with pytest.raises(FieldguideError) as err:
        calibrate_command(show=True)
    assert err.value.exit_code == 2 and "\n" not in str(err.value) and "fieldguide calibrate" in str(err.value)


def test_a_second_run_uses_the_cache_and_says_so(xdg: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    runs: list[tuple[str, ...]] = []
    identity = {"kind": "identity", "torch": "2.13.0+cpu", "device": "cpu", "cuda": False, "cores": 2}

    def fake_bench(python: str, *args: str, on_record: Any = None) -> list[dict[str, Any]]:
        runs.append(args)
        if "--identify" in args:
            return [identity]
        records = [identity, *({"kind": "series", **p.to_json()} for p in points()),
                   {"kind": "not_measured", "group": "gpu", "reason": "no CUDA device"}, {"kind": "done"}]
        for r in records:
            on_record(r)
        return records

    monkeypatch.setattr(command, "_bench", fake_bench)
    monkeypatch.setattr(command, "torch_python", lambda: "python")
    assert calibrate_command() == 0
    assert runs == [("--identify",), ()]
    first = capsys.readouterr().out
    assert "Measured in" in first and "waiting_scaling_8" in first
    assert calibrate_command(as_json=True) == 0
    assert runs[-1] == ("--identify",)  # nothing measured again
    out, err = capsys.readouterr()
    assert "Using the cached calibration" in err
    assert json.loads(out)["values"]["cpu_plateau_workers"] == 2
    calibrate_command(force=True)
    assert runs[-1] == ()
    assert calibrate_command(show=True) == 0
    assert "Calibration testhost · cpu" in capsys.readouterr().out


# -- thresholds that refer to the calibration -----------------------------------------------------

SPEC = {"median_kernel_us": {"at_least": {"calibrated": "gpu_launch_us", "times": 2, "fallback": 10}}}


def test_a_calibrated_threshold_parses_and_describes_itself() -> None:
    e = parse_expectation(SPEC)
    assert e.calibrated()
    assert e.describe() == "median_kernel_us >= 2 × calibrated gpu_launch_us (else 10)"
    assert not parse_expectation({"x": {"below": 1}}).calibrated()


@pytest.mark.parametrize(("spec", "field"), [
    ({"calibrated": "no_such_value", "fallback": 1}, "expect.x.below.calibrated"),
    ({"calibrated": "gpu_launch_us"}, "expect.x.below"),
    ({"calibrated": "gpu_launch_us", "fallback": "ten"}, "expect.x.below.fallback"),
    ({"calibrated": "gpu_launch_us", "fallback": 1, "times": True}, "expect.x.below.times"),
    ({"calibrated": "gpu_launch_us", "fallback": 1, "plus": 2}, "expect.x.below.plus"),
])
def test_a_malformed_calibrated_threshold_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ExpectationSyntaxError) as err:
        parse_expectation({"x": {"below": spec}})
    assert err.value.field == field


def test_without_a_calibration_the_fixed_threshold_is_used_and_said() -> None:
    e, notes = parse_expectation(SPEC).resolve(None)
    assert e.describe() == "median_kernel_us >= 10"
    assert notes == [f"median_kernel_us >= 10: {NO_CALIBRATION}"]
    assert "fixed threshold: no calibration for this machine (run fieldguide calibrate)" in notes[0]


def test_with_a_calibration_the_threshold_is_this_machines() -> None:
    e, notes = parse_expectation(SPEC).resolve(calibration(gpu=True).lookup)
    assert e.describe() == "median_kernel_us >= 9.2"
    assert notes[0].startswith("median_kernel_us >= 9.2: 2 × gpu_launch_us 4.6, calibrated on testhost (NVIDIA H200)")


def test_a_calibration_without_the_value_falls_back_and_says_why() -> None:
    e, notes = parse_expectation(SPEC).resolve(calibration(gpu=False).lookup)
    assert e.describe() == "median_kernel_us >= 10"
    assert notes == ["median_kernel_us >= 10: fixed threshold: the calibration of this machine has no "
                     "gpu_launch_us (no CUDA device)"]


def test_an_unresolved_calibrated_threshold_holds_like_its_fallback() -> None:
    e = parse_expectation(SPEC)
    assert e.holds({"median_kernel_us": 10}) and not e.holds({"median_kernel_us": 9.9})
    assert str(Calibrated("gpu_launch_us", 1.0, 3)) == "calibrated gpu_launch_us (else 3)"


# -- the node that uses it: low-gpu-util's device.launch-bound ---------------------------------

def profile(median_kernel_us: float) -> FakeMeasure:
    return FakeMeasure({"cuda.profile": {"kernels_per_step": 2000, "median_kernel_us": median_kernel_us,
                                         "kernel_busy_fraction": 0.5, "h2d_pageable_per_step": 0,
                                         "h2d_pageable_fraction": 0.0, "copy_fraction": 0.0}})


def test_launch_bound_node_without_calibration_uses_10_us_and_says_so() -> None:
    node = find_playbook("low-gpu-util").nodes["device.launch-bound"]
    result = judge(node, set(LAUNCH) | {"gpu"}, profile(7.0), None)
    assert result.status == DEPART
    assert result.expected == "(median_kernel_us >= 10 or kernels_per_step < 500)"
    assert NO_CALIBRATION in result.note


def test_launch_bound_node_with_calibration_uses_twice_the_launch_cost() -> None:
    node = find_playbook("low-gpu-util").nodes["device.launch-bound"]
    result = judge(node, set(LAUNCH) | {"gpu"}, profile(7.0), calibration(gpu=True).lookup)
    assert result.status == DEPART  # 7 µs < 2 × 4.6
    assert "median_kernel_us >= 9.2" in result.expected and "calibrated on testhost" in result.note
    fast_launches = calibration(gpu=True)
    fast_launches.values["gpu_launch_us"] = 3.0
    result = judge(node, set(LAUNCH) | {"gpu"}, profile(7.0), fast_launches.lookup)
    assert result.status == PASS and "median_kernel_us >= 6" in result.expected


def test_a_walk_reads_the_calibration_the_session_hands_it_from_the_cache(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "_installed_torch", lambda: None)
    book = find_playbook("low-gpu-util")
    walk = Walk(book, lambda: set(LAUNCH) | {"gpu"}, profile(7.0), calibration=cache.lookup_for_this_machine)
    assert NO_CALIBRATION in walk.run_node("device.launch-bound").note
    cache.write(calibration(gpu=True))
    walk = Walk(book, lambda: set(LAUNCH) | {"gpu"}, profile(7.0), calibration=cache.lookup_for_this_machine)
    assert "calibrated on testhost" in walk.run_node("device.launch-bound").note
    # The engine reads no disk: a walk handed no calibration uses fixed thresholds.
    assert NO_CALIBRATION in Walk(book, lambda: set(LAUNCH) | {"gpu"}, profile(7.0)).run_node("device.launch-bound").note
    # Nodes with only fixed thresholds never look for a calibration, nor say anything about one.
    assert "calibrat" not in walk.run_node("device.shared").note


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_cache_is_said_before_the_bench_runs(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33: `calibrate --force` on a read-only cache ran the whole bench, then died with a traceback."""
    runs: list[tuple[str, ...]] = []
    identity = {"kind": "identity", "torch": "2.13.0+cpu", "device": "cpu", "cuda": False, "cores": 2}

    def fake_bench(python: str, *args: str, on_record: Any = None) -> list[dict[str, Any]]:
        runs.append(args)
        return [identity]

    monkeypatch.setattr(command, "_bench", fake_bench)
    monkeypatch.setattr(command, "torch_python", lambda: "python")
    folder = cache.cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o500)
    try:
        with pytest.raises(FieldguideError, match="cannot cache the calibration"):
            calibrate_command(force=True)
    finally:
        folder.chmod(0o700)
    assert runs == [("--identify",)]  # the bench itself never ran


def test_a_cache_path_that_is_a_link_is_said_before_the_bench_runs(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[tuple[str, ...]] = []
    identity = {"kind": "identity", "torch": "2.13.0+cpu", "device": "cpu", "cuda": False, "cores": 2}
    monkeypatch.setattr(command, "_bench", lambda python, *args, on_record=None: runs.append(args) or [identity])
    monkeypatch.setattr(command, "torch_python", lambda: "python")
    path = cache.path_for("testhost", "2.13.0+cpu", "cpu")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(xdg / "elsewhere.json")
    with pytest.raises(FieldguideError, match="symbolic link"):
        calibrate_command(force=True)
    assert runs == [("--identify",)]
