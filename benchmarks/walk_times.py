"""How long a walk takes, over the zoo: launch mode, including each job's start.

usage: python benchmarks/walk_times.py [--playbook slow-training] [--repeat 2] [--budget 30] [--cold] [--only NAME ...]

Each zoo workload declared for the playbook in launch mode is diagnosed `--repeat` times, one
walk at a time. Printed: per workload the median wall time, the median of the walk's time past
the job's own start-up (wall time less the report's cold_start.total_s, the job's time to steady
steps: what the walk itself adds), and whether the walk named what the workload declares; then
the median over the zoo and the worst of each (the target: a median past start-up of 5 s). With `--budget`, every
walk runs under that budget (the contract: a walk ends within the budget, give or take one
probe window). With `--cold`, every walk gets an empty inductor cache (TORCHINDUCTOR_CACHE_DIR):
a compile-regression walk then includes a first run's cold compile.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIELDGUIDE = [sys.executable, "-m", "fieldguide"]


def one_walk(playbook: str, command: list[str], budget: float | None, cold: bool = False) -> tuple[float, dict]:
    folder = Path(tempfile.mkdtemp(prefix="fgbench-"))
    report = folder / "r.json"
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="200")
    if cold:
        env["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")
    cmd = [*FIELDGUIDE, "diagnose", "--playbook", playbook, "--report", str(report)]
    if budget is not None:
        cmd += ["--budget", str(budget)]
    t0 = time.monotonic()
    subprocess.run([*cmd, "--", *command], capture_output=True, text=True,
                   env=env, timeout=400)
    seconds = time.monotonic() - t0
    data = json.loads(report.read_text()) if report.exists() else {}
    return seconds, data


def main() -> None:
    from fieldguide import workloads

    ap = argparse.ArgumentParser()
    ap.add_argument("--playbook", default="slow-training")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--budget", type=float)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--cold", action="store_true", help="an empty inductor cache for every walk")
    args = ap.parse_args()
    chosen = [d for _, d in sorted(workloads.declarations().items())
              if d.playbook == args.playbook and "launch" in d.modes and (not args.only or d.name in args.only)]
    medians, past_medians = [], []
    print(f"## {args.playbook} walks, launch mode, including the job's start"
          + (f", --budget {args.budget:g}" if args.budget else "") + (", cold inductor cache" if args.cold else ""))
    for want in chosen:
        times, past, right = [], [], 0
        for _ in range(args.repeat):
            seconds, data = one_walk(args.playbook, workloads.command(want.name, sys.executable), args.budget,
                                     args.cold)
            times.append(seconds)
            steady = (data.get("cold_start") or {}).get("total_s")
            if isinstance(steady, (int, float)):
                past.append(seconds - steady)
            got = (data.get("first_departure") or {}).get("cause") or data.get("conclusion")
            right += data.get("verdict") == want.verdict and got == (want.cause or want.conclusion)
        medians.append(statistics.median(times))
        if past:
            past_medians.append(statistics.median(past))
        after = f"past start-up {statistics.median(past):5.1f} s" if past else "past start-up    n/a"
        print(f"{want.name:<26} median {medians[-1]:5.1f} s  {after}  (runs {', '.join(f'{t:.1f}' for t in times)})  "
              f"as declared {right}/{args.repeat}")
    if medians:
        print(f"over {len(medians)} workloads: median {statistics.median(medians):.1f} s, worst {max(medians):.1f} s")
    if past_medians:
        print(f"past the job's start-up: median {statistics.median(past_medians):.1f} s, "
              f"worst {max(past_medians):.1f} s (target: median 5 s)")


if __name__ == "__main__":
    main()
