"""What more intra-op threads would give a zoo workload: its step time at N threads, read from its
own optimizer steps, whatever torch.set_num_threads it calls (the call is made a no-op).

usage: python benchmarks/threads_ab.py WORKLOAD [--threads 1,2] [--warm 6] [--seconds 8] [--rounds 3]

Each round runs one process per thread count, in turn; prints the median ms/step per count and the
share of the step the larger count saves: the figure host.threads' threads_gain estimates.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import os, runpy, sys, threading, time, torch
import torch.optim.optimizer as optimizer
count, warm, seconds = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(count)
torch.set_num_threads = lambda n: None  # the workload's own pin is what is being measured away
steps = [0]
optimizer.register_optimizer_step_post_hook(lambda *a: steps.__setitem__(0, steps[0] + 1))
def report():
    time.sleep(warm); a, t = steps[0], time.monotonic(); time.sleep(seconds)
    print(f"MS {(time.monotonic() - t) / max(steps[0] - a, 1) * 1000:.3f}", flush=True); os._exit(0)
threading.Thread(target=report, daemon=True).start()
os.environ["FIELDGUIDE_WORKLOAD_SECONDS"] = str(warm + seconds + 30)
runpy.run_module(sys.argv[1], run_name="__main__")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workload")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--warm", type=float, default=6.0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    counts = [int(c) for c in args.threads.split(",")]
    module = args.workload if "." in args.workload else f"fieldguide.workloads.{args.workload}"
    times: dict[int, list[float]] = {c: [] for c in counts}
    for _ in range(args.rounds):
        for count in counts:
            out = subprocess.run([sys.executable, "-c", CHILD, module, str(count), str(args.warm), str(args.seconds)],
                                 capture_output=True, text=True, timeout=args.warm + args.seconds + 60).stdout
            line = next((ln for ln in out.splitlines() if ln.startswith("MS ")), None)
            if line:
                times[count].append(float(line.split()[1]))
    base = statistics.median(times[counts[0]]) if times[counts[0]] else None
    for count in counts:
        if not times[count]:
            print(f"{args.workload}: {count} threads: no steps read")
            continue
        med = statistics.median(times[count])
        saved = f", saves {1 - med / base:.0%} of the step" if base and count != counts[0] else ""
        print(f"{args.workload}: {count} thread(s) {med:.2f} ms/step (rounds {', '.join(f'{t:.1f}' for t in times[count])})"
              f"{saved}")


if __name__ == "__main__":
    main()
