"""Are the compile A/B's medians stable to within the spread it reports?

usage: python benchmarks/ab_stability.py [--repeat 4] [--only NAME ...]

Runs the compile-regression walk `--repeat` times on each zoo workload whose walk reaches the
A/B (compile.speed), and prints per run the speedup (eager median / compiled median) with the
min-max of its rounds; then whether every run's speedup lies inside every other run's min-max
(stable within the reported spread), and the spread of the speedups themselves.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from walk_times import one_walk  # noqa: E402

REACHES_AB = ("compile_tiny_logreg_slower", "compile_pointwise_faster")


def speed_of(data: dict) -> dict | None:
    evidence = (data.get("evidence") or {}).get("compile.speed") or {}
    return evidence.get("values")


def main() -> None:
    from fieldguide import workloads

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    print("## compile A/B stability: speedup (eager median / compiled median), [min-max over its rounds]")
    for name in args.only or REACHES_AB:
        runs = []
        for _ in range(args.repeat):
            seconds, data = one_walk("compile-regression", workloads.path(name), None)
            values = speed_of(data)
            if values and values.get("speedup"):
                runs.append(values)
                print(f"{name:<28} {values['speedup']:.3f}x  [{values['speedup_min']:.3f}-{values['speedup_max']:.3f}]"
                      f"  compiled {values['compiled_step_ms']:.3g} ms, eager {values['eager_step_ms']:.3g} ms, "
                      f"{values['compiled_steps']}+{values['eager_steps']} steps, walk {seconds:.0f} s")
            else:
                print(f"{name:<28} no A/B in this walk ({data.get('verdict')}, walk {seconds:.0f} s)")
        if len(runs) >= 2:
            speedups = [r["speedup"] for r in runs]
            inside = all(r["speedup_min"] <= s <= r["speedup_max"] for r in runs for s in speedups)
            print(f"{name:<28} median {statistics.median(speedups):.3f}x, runs {min(speedups):.3f}-{max(speedups):.3f}; "
                  f"every run inside every other's min-max: {'yes' if inside else 'no'}")


if __name__ == "__main__":
    main()
