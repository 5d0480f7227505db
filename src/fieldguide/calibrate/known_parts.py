"""Datasheet peaks of common NVIDIA data-centre GPUs, for a machine `fieldguide calibrate` has not
measured: dense matmul rates (no structured sparsity), TFLOP/s, as NVIDIA's datasheets state them.

A datasheet peak is what the part can do at its boost clock, not what this machine did: a tuned
matmul reaches about 75-90% of it (fieldguide's calibrate read 51 of 67 TFLOP/s fp32, 390 of 495
TF32 and 790 of 989 bf16 on an H200). A share of it is marked as a table's, never as measured.
"""

from __future__ import annotations

# part: (fp32, tf32, bf16, fp16); None where the part has no such tensor-core path.
PEAKS: dict[str, tuple[float, float | None, float | None, float | None]] = {
    "H100 SXM": (67.0, 494.7, 989.4, 989.4),
    "H100 PCIe": (51.0, 378.0, 756.0, 756.0),
    "H200 SXM": (67.0, 494.7, 989.4, 989.4),
    "A100": (19.5, 156.0, 312.0, 312.0),
    "L40S": (91.6, 183.0, 362.0, 362.0),
    "L4": (30.3, 60.0, 121.0, 121.0),
    "A10": (31.2, 62.5, 125.0, 125.0),
    "V100 SXM2": (15.7, None, None, 125.0),
    "V100 PCIe": (14.0, None, None, 112.0),
    "T4": (8.1, None, None, 65.0),
}
METRICS = ("gpu_matmul_tflops_fp32", "gpu_matmul_tflops_tf32", "gpu_matmul_tflops_bf16", "gpu_matmul_tflops_fp16")


def part_of(device_name: str) -> str | None:
    """The table's part for a CUDA device name (torch.cuda.get_device_name, NVML's name): "NVIDIA
    H100 80GB HBM3" is the H100 SXM. Variants the table does not hold (NVL boards, A10G, Blackwell)
    are None rather than a near neighbour's figures."""
    words = device_name.upper().replace("-", " ").split()
    if "NVL" in words or "A10G" in words:
        return None
    if "H100" in words:
        return "H100 PCIe" if "PCIE" in words else "H100 SXM"
    if "H200" in words:
        return "H200 SXM"
    if "A100" in words:
        return "A100"
    if "V100" in words:
        return "V100 PCIe" if "PCIE" in words else "V100 SXM2"
    for part in ("L40S", "L4", "A10", "T4"):
        if part in words:
            return part
    return None


def datasheet_peak(device_name: str, metric: str) -> tuple[float | None, str]:
    """The part's datasheet peak for `metric` (one of METRICS), in TFLOP/s, and where it came from;
    None with the reason where the table has no figure."""
    part = part_of(device_name)
    if part is None:
        return None, f"no datasheet figure for {device_name or 'this GPU'} in fieldguide's table"
    value = PEAKS[part][METRICS.index(metric)] if metric in METRICS else None
    if value is None:
        return None, f"the {part} has no {metric.rsplit('_', 1)[-1]} tensor-core rate in its datasheet"
    return value, (f"the {part}'s datasheet peak ({metric.rsplit('_', 1)[-1]}, dense), a table's figure, "
                   f"not measured here: `fieldguide calibrate` measures this machine's")
