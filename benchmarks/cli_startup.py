"""How long `fieldguide --help` takes, and what `import fieldguide.frontends.cli` loads.

    .venv/bin/python benchmarks/cli_startup.py [--runs 5]

The target: under 0.3 s (best of the runs) on a 2-core machine. A wall-clock budget belongs
here, not in the test suite, where a busy machine would make it flaky; the tests check the
cause of a fast start instead (the CLI imports no torch, Textual, pynvml, psutil or rich).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_S = 0.3
HEAVY = ("torch", "textual", "pynvml", "psutil", "rich")


def time_help() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fieldguide", "--help"], capture_output=True, check=True)
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times = [time_help() for _ in range(max(1, args.runs))]
    code = "import sys, fieldguide.frontends.cli; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    heavy = sorted(m for m in HEAVY if m in loaded)
    best = min(times)
    print(f"fieldguide --help: best {best * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms "
          f"over {len(times)} runs (target < {TARGET_S * 1000:.0f} ms)")
    print(f"heavy modules loaded by `import fieldguide.frontends.cli`: {', '.join(heavy) or 'none'}")
    return 0 if best < TARGET_S and not heavy else 1


if __name__ == "__main__":
    sys.exit(main())
