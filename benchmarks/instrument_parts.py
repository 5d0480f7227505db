"""Which of a walk's instruments costs the job what: each toggled on and off, one at a time, on
one launched job, judged by the job's own step clock.

usage: python benchmarks/instrument_parts.py [--width 768] [--blocks 8]
           [--parts nothing,sampler,pyspy,opprofile,native,pyspy-native]

The job is benchmarks/observer_job.py (width 768: ~5 ms steps on the 2-core box), launched with
fieldguide's agent and no walk. After a warm-up, blocks of BLOCK_S seconds alternate: nothing,
then the part on, then nothing... A part's cost in one block is its mean step time against the
mean of the blocks just before and after it (one process against itself). Parts:
- nothing: a null control (the same split with nothing on);
- sampler: the agent's input-phase sampler at 50 Hz (`input_stacks`, as loop.steps asks where it
  samples; SAMPLER_SHARE and ENOUGH_SAMPLES bound it);
- pyspy: two `py-spy record --nonblocking` at 20 Hz (idle and on-CPU, as stacks.sample runs them);
- opprofile: one torch.profiler window of 5 steps (as host.overhead's torch.ops asks), once a block;
- native: stacks.native's read of the job's BLAS precision by the kernel's task-clock sampler
  (perf_event_open, 100 Hz, the block's length; symbols read afterwards, outside the job);
- pyspy-native: the read it replaced where the kernel refuses, `py-spy record --native` at 10 Hz.
Printed per part: the median over blocks, quartiles, each block's figure, and the job's longest
step-to-step gap in each block (a stall shows there first). observer_effect.py
measures whole walks; this says which part of one a change should go after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK_S = 2.0
WARM_S = 3.0
PARTS = ("nothing", "sampler", "pyspy", "opprofile", "native", "pyspy-native")


def mean_step(ends: list[float], start: float, end: float) -> float:
    inside = [t for t in ends if start <= t <= end]
    return (inside[-1] - inside[0]) / max(len(inside) - 1, 1)


def switch_on(part: str, target: object, pid: int, folder: Path) -> None:
    """Run `part` for about one block."""
    started = time.monotonic()
    agent = target.agent  # type: ignore[attr-defined]
    if part == "sampler":
        agent.request("loop", {"seconds": BLOCK_S, "rate": 50.0}, timeout=BLOCK_S + 5, name="input_stacks")
    elif part == "pyspy":
        spy = str(Path(sys.executable).with_name("py-spy"))
        procs = [subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "20", "--duration", str(int(BLOCK_S)),
                                   "--nonblocking", "--format", "raw", "--output", str(folder / f"spy{k}.txt"),
                                   *(["--idle"] if k else [])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k in range(2)]
        for proc in procs:
            proc.wait()
    elif part == "opprofile":
        from fieldguide.probes.opprofile import ask_profile

        ask_profile(agent, 5, 10.0)  # the job records and sends its trace; fieldguide reads it
    elif part == "native":
        from fieldguide.probes.native_stacks import NativeStacks

        _, _, refused = NativeStacks._sample_in_kernel(pid, BLOCK_S, 100)
        if refused:
            sys.exit(f"instrument_parts: {refused}")
    elif part == "pyspy-native":
        from fieldguide.probes.native_stacks import NativeStacks

        NativeStacks._record(str(Path(sys.executable).with_name("py-spy")), pid, BLOCK_S, 10)
    time.sleep(max(BLOCK_S - (time.monotonic() - started), 0.0))


def longest_gap(ends: list[float], start: float, end: float) -> float:
    inside = [t for t in ends if start <= t <= end]
    return max((b - a for a, b in zip(inside, inside[1:], strict=False)), default=0.0)


def measure(part: str, width: int, blocks: int) -> tuple[list[float], list[float]]:
    from fieldguide.targets import LaunchTarget

    folder = Path(tempfile.mkdtemp(prefix="fgparts-"))
    log = folder / "steps.log"
    env = dict(os.environ, OBSERVER_LOG=str(log), OBSERVER_WIDTH=str(width), OBSERVER_SECONDS="600")
    target = LaunchTarget([sys.executable, str(HERE / "observer_job.py")], echo=lambda line: None, env=env)
    try:
        while not log.exists() or not log.read_text().strip():
            time.sleep(0.1)
        time.sleep(WARM_S)
        spans: list[tuple[float, float]] = []
        for _ in range(blocks):
            start = time.monotonic()
            time.sleep(BLOCK_S)
            spans.append((start, time.monotonic()))
            start = time.monotonic()
            switch_on(part, target, target.pid or 0, folder)
            spans.append((start, time.monotonic()))
        start = time.monotonic()
        time.sleep(BLOCK_S)
        spans.append((start, time.monotonic()))
    finally:
        target.close()
    ends = [float(x) for x in log.read_text().split()]
    costs, gaps = [], []
    for k in range(1, len(spans) - 1, 2):
        reference = (mean_step(ends, *spans[k - 1]) + mean_step(ends, *spans[k + 1])) / 2
        costs.append(mean_step(ends, *spans[k]) / reference - 1)
        gaps.append(longest_gap(ends, *spans[k]))
    return costs, gaps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--parts", default=",".join(PARTS))
    args = ap.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if any(p not in PARTS for p in parts):
        sys.exit(f"instrument_parts: parts are {', '.join(PARTS)}")
    print(f"each part on and off in {BLOCK_S:.0f} s blocks, {args.blocks} blocks, width {args.width}; "
          f"load {os.getloadavg()[0]:.1f}")
    for part in parts:
        costs, gaps = measure(part, args.width, args.blocks)
        q = statistics.quantiles(costs, n=4)
        print(f"{part:<12} median {statistics.median(costs):+6.2%}  quartiles {q[0]:+6.2%} .. {q[2]:+6.2%}  "
              f"blocks {' '.join(f'{c:+.1%}' for c in costs)}", flush=True)
        print(f"{'':<12} longest step gap a block (ms): {' '.join(f'{1000 * g:.0f}' for g in gaps)}", flush=True)


if __name__ == "__main__":
    main()
