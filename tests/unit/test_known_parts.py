"""An uncalibrated GPU machine's peak: the part's datasheet figure, matched by its device name and
marked as a table's; parts the table does not hold (or a near neighbour's name) get none."""

from __future__ import annotations

import pytest

from fieldguide.calibrate.known_parts import PEAKS, datasheet_peak, part_of
from fieldguide.probes import efficiency


@pytest.mark.parametrize(("name", "part"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"), ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"), ("Tesla T4", "T4"),
    # Variants whose figures differ from their family's: no entry rather than a neighbour's.
    ("NVIDIA H100 NVL", None), ("NVIDIA H200 NVL", None), ("NVIDIA A10G", None), ("NVIDIA GH200 480GB", None),
    ("NVIDIA B200", None), ("NVIDIA GeForce RTX 4090", None), ("", None), ("L4O", None),
])
def test_a_device_name_finds_its_part_and_no_near_neighbour(name: str, part: str | None) -> None:
    assert part_of(name) == part


def test_a_datasheet_peak_names_its_part_and_says_it_was_not_measured() -> None:
    value, source = datasheet_peak("NVIDIA H100 80GB HBM3", "gpu_matmul_tflops_bf16")
    assert value == 989.4
    assert "H100 SXM" in source and "not measured" in source and "fieldguide calibrate" in source
    assert datasheet_peak("Tesla T4", "gpu_matmul_tflops_tf32")[0] is None  # no TF32 path on a T4
    assert datasheet_peak("Tesla T4", "gpu_matmul_tflops_fp16")[0] == 65.0
    assert datasheet_peak("NVIDIA B200", "gpu_matmul_tflops_fp32") == (
        None, "no datasheet figure for NVIDIA B200 in fieldguide's table")
    # Every part's rates rise from fp32 to the tensor-core paths: a typo'd figure would show.
    for fp32, tf32, bf16, fp16 in PEAKS.values():
        assert all(r is None or r >= fp32 for r in (tf32, bf16, fp16))


def test_an_uncalibrated_gpu_is_measured_against_its_datasheet_marked_so(monkeypatch) -> None:
    from fieldguide.calibrate import cache

    monkeypatch.setattr(cache, "for_this_machine", lambda: None)
    state = {"cuda_device": "NVIDIA A100-SXM4-80GB", "matmul_precision": "highest"}
    peak, source, measured = efficiency.peak_for({"float32 cuda matmul": 1e12}, state)
    assert (peak, measured) == (19.5 * 1000, False) and "A100" in source
    peak, source, measured = efficiency.peak_for({"bfloat16 cuda matmul": 1e12}, state)
    assert peak == 312.0 * 1000
    # A CPU step, or a GPU the table does not hold: no peak, and why.
    assert efficiency.peak_for({"float32 cpu matmul": 1e9}, state)[0] is None
    peak, source, _ = efficiency.peak_for({"float32 cuda matmul": 1e12}, {"cuda_device": "NVIDIA B200"})
    assert peak is None and "not calibrated" in source and "no datasheet figure" in source


def test_the_report_says_a_datasheet_share_is_not_this_machines(walk_with) -> None:
    from fieldguide.report.findings import environment_from, findings_from_walk
    from fieldguide.report.render import render

    walk, _ = walk_with({})
    env = environment_from({"python": "3.11", "torch": "2.13.0", "cuda": "12.8", "cpu_cores": 2, "nvml": "ok"}, [])
    findings = findings_from_walk(walk, {"kind": "launch", "pid": 1, "cmdline": ["python", "t.py"]}, env)
    findings.evidence["device.efficiency"] = {"rate": {
        "gflop_per_step": 400.0, "dtype_mix": "float32 on cuda 100% of 400 GFLOP a step", "achieved_gflops": 9750.0,
        "peak_gflops": 19500.0, "peak_measured": False,
        "peak_from": "the A100's datasheet peak (fp32, dense), a table's figure, not measured here"}}
    text = render(findings, "md")
    assert "50% of a datasheet's peak for this GPU (19500 GFLOP/s; the A100's datasheet peak" in text
    assert "of this machine's peak (" not in text
