"""A calibration: what the bench measured on this machine, and the named values playbooks may use.

No torch here: the bench's JSON lines are read into plain data. A value that could not be
measured is None with its reason in `missing` ("no CUDA device"), never a made-up number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1

# The values a playbook threshold may refer to (`{calibrated: NAME, times: X, fallback: Y}`).
VALUES: dict[str, str] = {
    "waiting_scaling_8": "waiting loader: 8 workers' speed-up over 0",
    "cpu_plateau_workers": "CPU-work loader: workers within 15% of best",
    "cpu_matmul_gflops": "CPU matmul fp32 1024², GFLOP/s",
    "cpu_matmul_gflops_fp64": "CPU matmul fp64 1024², GFLOP/s",
    "gpu_matmul_tflops_fp32": "GPU matmul 4096², fp32 (no TF32), TFLOP/s",
    "gpu_matmul_tflops_tf32": "GPU matmul 4096², TF32, TFLOP/s",
    "gpu_matmul_tflops_bf16": "GPU matmul 4096², bf16, TFLOP/s",
    "gpu_matmul_tflops_fp16": "GPU matmul 4096², fp16, TFLOP/s",
    "gpu_h2d_pinned_gbs": "host→device from pinned memory, GB/s",
    "gpu_h2d_pageable_gbs": "host→device from pageable memory, GB/s",
    "gpu_launch_us": "µs per tiny kernel, back to back, synced",
    "gpu_sync_us": "µs per cuda.synchronize(), idle stream",
}

PLATEAU_WITHIN = 0.85  # a worker count within 15% of the pipeline's best rate has reached the plateau

# series name and x -> the value it gives directly
_DIRECT: dict[tuple[str, Any], str] = {
    ("cpu.matmul", 1024): "cpu_matmul_gflops",
    ("cpu.matmul.fp64", 1024): "cpu_matmul_gflops_fp64",
    **{("gpu.matmul", d): f"gpu_matmul_tflops_{d}" for d in ("fp32", "tf32", "bf16", "fp16")},
    ("gpu.h2d", "pinned"): "gpu_h2d_pinned_gbs",
    ("gpu.h2d", "pageable"): "gpu_h2d_pageable_gbs",
    ("gpu.launch", "tiny kernel"): "gpu_launch_us",
    ("gpu.sync", "idle stream"): "gpu_sync_us",
}


@dataclass(frozen=True)
class Point:
    """One point of a series: the median of repeats, and their min and max."""

    series: str  # "loader.waiting", "loader.cpu", "cpu.matmul", "gpu.matmul", "gpu.h2d", ...
    x: Any  # workers, matrix size, dtype, memory kind
    unit: str
    median: float
    min: float
    max: float
    repeats: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Point:
        return cls(series=str(data.get("series", data.get("name"))), x=data["x"], unit=str(data["unit"]),
                   median=float(data["median"]), min=float(data["min"]), max=float(data["max"]),
                   repeats=int(data.get("repeats", 0)))

    def to_json(self) -> dict[str, Any]:
        return {"series": self.series, "x": self.x, "unit": self.unit, "median": self.median,
                "min": self.min, "max": self.max, "repeats": self.repeats}


@dataclass
class Calibration:
    host: str
    torch: str
    device: str
    created: str  # ISO 8601, UTC
    elapsed_s: float
    points: list[Point]
    values: dict[str, float | None] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # value name -> why it was not measured
    identity: dict[str, Any] = field(default_factory=dict)  # what the bench said about itself (cores, cpu, quick)

    def series(self, name: str) -> list[Point]:
        return [p for p in self.points if p.series == name]

    def lookup(self, name: str) -> tuple[float | None, str]:
        """(value, where it comes from), or (None, why this calibration has none)."""
        value = self.values.get(name)
        if value is None:
            why = self.missing.get(name, "not measured")
            return None, f"the calibration of this machine has no {name} ({why})"
        return float(value), f"calibrated on {self.host} ({self.device}) {self.created[:10]}"

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "host": self.host, "torch": self.torch, "device": self.device,
                "created": self.created, "elapsed_s": round(self.elapsed_s, 2), "identity": self.identity,
                "values": self.values, "missing": self.missing, "points": [p.to_json() for p in self.points]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"calibration schema {data.get('schema')!r}, expected {SCHEMA}")
        values = data.get("values") or {}
        return cls(host=str(data["host"]), torch=str(data["torch"]), device=str(data["device"]),
                   created=str(data["created"]), elapsed_s=float(data["elapsed_s"]),
                   points=[Point.from_json(p) for p in data.get("points", [])],
                   values={str(k): (None if v is None else float(v)) for k, v in values.items()},
                   missing={str(k): str(v) for k, v in (data.get("missing") or {}).items()},
                   identity=dict(data.get("identity") or {}))


def plateau(points: list[Point]) -> int | None:
    """The fewest workers whose median is within 15% of the best median (the largest count when
    the pipeline is still scaling)."""
    if not points:
        return None
    best = max(p.median for p in points)
    return int(min(p.x for p in points if p.median >= PLATEAU_WITHIN * best))


def derive(points: list[Point], not_measured: dict[str, str]) -> tuple[dict[str, float | None], dict[str, str]]:
    """The named values, from the points; each one without a point gets its reason.

    `not_measured` maps a group ("gpu") to why the bench measured none of it."""
    values: dict[str, float | None] = dict.fromkeys(VALUES)
    for p in points:
        name = _DIRECT.get((p.series, p.x))
        if name is not None:
            values[name] = p.median
    waiting = {p.x: p.median for p in points if p.series == "loader.waiting"}
    if 0 in waiting and 8 in waiting and waiting[0] > 0:
        values["waiting_scaling_8"] = waiting[8] / waiting[0]
    cpu_plateau = plateau([p for p in points if p.series == "loader.cpu"])
    if cpu_plateau is not None:
        values["cpu_plateau_workers"] = float(cpu_plateau)
    missing: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            group = name.split("_", 1)[0]
            missing[name] = not_measured.get(group, "not measured")
    return values, missing
