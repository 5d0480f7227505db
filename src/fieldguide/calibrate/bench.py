"""The calibration workloads: run as a script by a Python that has torch (stdlib + torch only).

fieldguide's own process never imports this module: `fieldguide calibrate` runs
`python bench.py [--quick]` and reads one JSON line per measurement as it finishes:

  {"kind": "identity", "torch": ..., "device": ..., "cuda": bool, "cores": n}
  {"kind": "series", "series": "loader.waiting", "x": 4, "unit": "batches/s", "median": ..., "min": ..., "max": ...}
  {"kind": "not_measured", "group": "gpu", "reason": "no CUDA device"}
  {"kind": "done"}

Honest timing: every series is warmed up first, GPU work is synchronized before a clock is
read, and each point is the median of repeats, with their min and max beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLE_SECONDS = 0.004  # what producing one sample costs, in both pipelines
BATCH = 8


def emit(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def spread(name: str, x: float | str, unit: str, samples: list[float]) -> None:
    emit({"kind": "series", "series": name, "x": x, "unit": unit, "median": statistics.median(samples),
          "min": min(samples), "max": max(samples), "repeats": len(samples)})


def spin(seconds: float) -> int:
    """CPU work: a busy loop until this thread has had `seconds` of CPU time (not wall time: under
    contention the same work takes longer, as real decoding or augmentation would)."""
    end = time.thread_time() + seconds
    total = 0
    while time.thread_time() < end:
        for i in range(100):
            total += i * i
    return total


class Pipeline(Dataset[torch.Tensor]):
    """A sample that costs SAMPLE_SECONDS: waiting (a sleep, as remote storage would) or CPU work."""

    def __init__(self, kind: str):
        self.kind = kind

    def __len__(self) -> int:
        return 10**8

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.kind == "waiting":
            time.sleep(SAMPLE_SECONDS)
        else:
            spin(SAMPLE_SECONDS)
        return torch.full((16,), float(index))


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def worker_counts() -> list[int]:
    """0, then powers of two up to at least twice the cores (8 at the least), capped at 32."""
    top = min(max(8, 2 * cores()), 32)
    counts, w = [0], 1
    while w <= top:
        counts.append(w)
        w *= 2
    return counts


def loader_rates(kind: str, workers: int, repeats: int, window: float, warm: float) -> list[float]:
    context = "fork" if workers and sys.platform == "linux" else None  # spawn re-imports torch per worker
    loader = DataLoader(Pipeline(kind), batch_size=BATCH, num_workers=workers, multiprocessing_context=context)
    it = iter(loader)
    # Warm-up: workers started, and the prefetched batches (2 per worker) drained: the rest is steady state.
    start, n = time.perf_counter(), 0
    while n < 2 * workers + 2 or time.perf_counter() - start < warm:
        next(it)
        n += 1
    rates = []
    for _ in range(repeats):
        start, n = time.perf_counter(), 0
        while True:
            next(it)
            n += 1
            now = time.perf_counter()
            if now - start >= window:
                break
        rates.append(n / (now - start))
    del it  # ends the workers
    return rates


def timed(fn: Callable[[], Any], repeats: int, target: float, sync: Callable[[], None]) -> tuple[int, list[float]]:
    """Seconds per call of fn, one sample per repeat, each repeat `inner` calls lasting about `target`."""
    for _ in range(2):
        fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - start, 1e-6)
    inner = max(1, int(target / once))
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / inner)
    return inner, samples


def cpu_matmul(n: int, repeats: int, target: float, dtype: torch.dtype = torch.float32) -> None:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    _, seconds = timed(partial(torch.matmul, a, b), repeats, target, lambda: None)
    series = "cpu.matmul" if dtype == torch.float32 else f"cpu.matmul.{str(dtype).replace('torch.float', 'fp')}"
    spread(series, n, "GFLOP/s", [2 * n**3 / s / 1e9 for s in seconds])


def gpu(repeats: int, target: float) -> None:
    sync = torch.cuda.synchronize
    n = 4096
    for name, dtype, precision in (("fp32", torch.float32, "highest"), ("tf32", torch.float32, "high"),
                                   ("bf16", torch.bfloat16, "highest"), ("fp16", torch.float16, "highest")):
        torch.set_float32_matmul_precision(precision)
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        _, seconds = timed(partial(torch.matmul, a, a.clone()), repeats, target, sync)
        spread("gpu.matmul", name, "TFLOP/s", [2 * n**3 / s / 1e12 for s in seconds])
    torch.set_float32_matmul_precision("highest")
    size = 256 * 2**20
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    for memory, pinned in (("pinned", True), ("pageable", False)):
        src = torch.ones(size, dtype=torch.uint8, pin_memory=pinned)
        _, seconds = timed(partial(dst.copy_, src, non_blocking=True), repeats, target, sync)
        spread("gpu.h2d", memory, "GB/s", [size / s / 1e9 for s in seconds])
    tiny = torch.zeros(1, device="cuda")
    launches = 1000

    def many_launches() -> None:
        for _ in range(launches):
            tiny.add_(1)

    _, seconds = timed(many_launches, repeats, target, sync)
    spread("gpu.launch", "tiny kernel", "us", [s / launches * 1e6 for s in seconds])

    def many_syncs() -> None:
        for _ in range(launches):
            sync()

    _, seconds = timed(many_syncs, repeats, target, sync)
    spread("gpu.sync", "idle stream", "us", [s / launches * 1e6 for s in seconds])


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and shorter windows (tests)")
    parser.add_argument("--identify", action="store_true", help="print the identity line only (the cache key)")
    args = parser.parse_args(argv)
    # More workers than cores is the point of the CPU pipeline: torch's advice against it is noise here.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    repeats, window, warm, target = (3, 0.15, 0.1, 0.03) if args.quick else (5, 0.3, 0.2, 0.08)
    cuda = torch.cuda.is_available()
    emit({"kind": "identity", "torch": torch.__version__, "cuda": cuda, "cores": cores(), "cpu": cpu_name(),
          "device": torch.cuda.get_device_name(0) if cuda else "cpu", "quick": args.quick,
          "sample_ms": SAMPLE_SECONDS * 1e3, "batch": BATCH, "python": sys.version.split()[0]})
    if args.identify:
        return 0
    for n in (512, 1024):
        cpu_matmul(n, repeats, target)
    cpu_matmul(1024, repeats, target, torch.float64)  # the peak a float64 step is judged against
    for kind in ("waiting", "cpu"):
        for workers in worker_counts():
            spread(f"loader.{kind}", workers, "batches/s", loader_rates(kind, workers, repeats, window, warm))
    if cuda:
        gpu(repeats, target)
    else:
        emit({"kind": "not_measured", "group": "gpu", "reason": "no CUDA device"})
    emit({"kind": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
