"""What fieldguide costs: walk time per target, and the slowdown of attaching and of the agent.

usage: python benchmarks/overhead.py [--rounds 3]

1. Walk time: `fieldguide diagnose` on a zoo workload, launch mode, including the target's start.
2. Attach slowdown: one run of bench_target.py; steps/s in windows while nothing is attached
   versus windows while `fieldguide diagnose --pid` walks it, interleaved.
3. Agent slowdown: bench_target.py plain and with fieldguide's agent loaded, side by side
   (see agent_cost.py); agent_hooks.py gives the per-step cost of each hook in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "bench_target.py"
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]


def read_rates(proc: subprocess.Popen[str], out: list[tuple[float, int]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        out.append((row["t"], row["steps"]))


def rate_between(rows: list[tuple[float, int]], t0: float, t1: float) -> float:
    inside = [r for r in rows if t0 <= r[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def walk_times(names: list[str]) -> None:
    from fieldguide import workloads

    print("## walk time per target (launch mode, including the target's start)")
    for name in names:
        t0 = time.monotonic()
        proc = subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--",
                               sys.executable, str(workloads.path(name))], capture_output=True, text=True,
                              env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="90"))
        print(f"{name:<26} {time.monotonic() - t0:5.1f} s  exit {proc.returncode}")


def attach_slowdown(rounds: int) -> None:
    print("## attach slowdown (one run; windows without vs with a walk attached)")
    proc = subprocess.Popen([sys.executable, str(TARGET)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, BENCH_SECONDS=str(40 * rounds + 30)))
    rows: list[tuple[float, int]] = []
    threading.Thread(target=read_rates, args=(proc, rows), daemon=True).start()
    time.sleep(6)  # warm up
    free, attached = [], []
    try:
        for _ in range(rounds):
            t0 = time.monotonic()
            time.sleep(15)
            free.append(rate_between(rows, t0 + 1, time.monotonic()))
            t0 = time.monotonic()
            subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--pid",
                            str(proc.pid)], capture_output=True)
            attached.append(rate_between(rows, t0, time.monotonic()))
    finally:
        proc.kill()
    f, a = statistics.median(free), statistics.median(attached)
    print(f"steps/s free {f:.1f} (windows {', '.join(f'{x:.1f}' for x in free)})")
    print(f"steps/s attached {a:.1f} (windows {', '.join(f'{x:.1f}' for x in attached)})")
    print(f"slowdown while attached: {100 * (1 - a / f):+.1f}%")


def agent_slowdown(rounds: int) -> None:
    """Plain and agent jobs side by side (benchmarks/agent_cost.py), `rounds` times."""
    sys.path.insert(0, str(HERE))
    from agent_cost import one_round

    print("## agent slowdown (plain and agent jobs side by side, same window)")
    costs = []
    for i in range(rounds):
        plain, agent, _ = one_round(12.0, agent_first=bool(i % 2))
        costs.append(1 - agent / plain)
        print(f"round {i + 1}: plain {plain:.1f}, agent {agent:.1f} steps/s: {costs[-1]:+.1%}")
    print(f"agent slowdown: median {statistics.median(costs):+.1%} (min {min(costs):+.1%}, max {max(costs):+.1%})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-walks", action="store_true")
    args = ap.parse_args()
    if not args.skip_walks:
        walk_times(["loader_remote_reads", "healthy_mlp", "tiny_ops_loop", "worker_restart_epochs"])
    attach_slowdown(args.rounds)
    agent_slowdown(args.rounds)


if __name__ == "__main__":
    main()
