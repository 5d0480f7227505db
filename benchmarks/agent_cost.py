"""What the in-process agent costs a training job: plain vs agent, side by side.

usage: python benchmarks/agent_cost.py [--rounds 8] [--seconds 12] [--arm memory] [--sample] [--width N]

With --arm, the agent's named capabilities measure from the job's start, as the oom
playbook asks (memory: a saved-tensor pack hook on every step's forward). With --sample, the
agent samples the training thread's input phase all the time (`input_stacks` windows back to
back at 50 Hz, as loop.steps asks during a walk). --width sets the MLP's
width in bench_target.py (1024: ~10-16 ms steps here; 256: ~3 ms).

Each round starts bench_target.py twice at the same moment, once plain and once
with fieldguide's agent loaded (LaunchTarget, no probes), each on one intra-op
thread, so that both see the same machine load; which starts first alternates.
The cost of a round is 1 - agent steps/s / plain steps/s over the same window
(after a 3 s warm-up). Reported: the median over rounds and the spread (min,
quartiles, max). Both jobs get the same environment (PYTHONUNBUFFERED, a pipe
for stdout, their own session): only the agent differs.
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
WARMUP_S = 3.0


def rate(rows: list[tuple[float, int]], t0: float, t1: float) -> float:
    inside = [r for r in rows if t0 <= r[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def parse(lines: list[str]) -> list[tuple[float, int]]:
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "t" in row:
            rows.append((row["t"], row["steps"]))
    return rows


def keep_sampling(target: object, until: float) -> None:
    """input_stacks windows back to back while the job runs, as a walk's loop.steps asks for one."""
    while time.monotonic() < until:
        conn = target.agent.primary() if target.agent else None  # type: ignore[attr-defined]
        if conn is None or not conn.steps_total:
            time.sleep(0.1)
            continue
        target.agent.request("loop", {"seconds": 3.0, "rate": 50}, timeout=10,  # type: ignore[attr-defined]
                             name="input_stacks")


def one_round(seconds: float, agent_first: bool, arm: tuple[str, ...] = (), sample: bool = False,
              width: int = 1024) -> tuple[float, float, int]:
    from fieldguide.targets import LaunchTarget

    env = dict(os.environ, BENCH_SECONDS=str(seconds), PYTHONUNBUFFERED="1", BENCH_WIDTH=str(width))
    plain_lines: list[str] = []
    agent_lines: list[str] = []
    target = None

    def start_plain() -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, str(TARGET)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        threading.Thread(target=lambda: plain_lines.extend(proc.stdout or []), daemon=True).start()
        return proc

    if agent_first:
        target = LaunchTarget([sys.executable, str(TARGET)], echo=agent_lines.append, env=env, arm=arm)
        plain = start_plain()
    else:
        plain = start_plain()
        target = LaunchTarget([sys.executable, str(TARGET)], echo=agent_lines.append, env=env, arm=arm)
    if sample:
        threading.Thread(target=keep_sampling, args=(target, time.monotonic() + seconds), daemon=True).start()
    plain.wait()
    target.popen.wait()
    time.sleep(0.5)
    conn = target.agent.primary() if target.agent else None
    steps_seen = conn.steps_total if conn is not None else 0
    target.close()
    p_rows, a_rows = parse(plain_lines), parse(agent_lines)
    # The same wall window for both: from the later start (+ warm-up) to the earlier end.
    t0 = max(p_rows[0][0], a_rows[0][0]) + WARMUP_S
    t1 = min(p_rows[-1][0], a_rows[-1][0])
    return rate(p_rows, t0, t1), rate(a_rows, t0, t1), steps_seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--arm", default="", help="agent capabilities armed from the start, e.g. memory")
    ap.add_argument("--sample", action="store_true", help="the input phase sampled throughout")
    ap.add_argument("--width", type=int, default=1024, help="the benchmark MLP's width (256: ~3 ms steps)")
    args = ap.parse_args()
    arm = tuple(a for a in args.arm.split(",") if a)
    costs = []
    print("round  plain steps/s  agent steps/s  cost    agent saw")
    for i in range(args.rounds):
        plain, agent, seen = one_round(args.seconds, agent_first=bool(i % 2), arm=arm, sample=args.sample,
                                       width=args.width)
        cost = 1 - agent / plain
        costs.append(cost)
        print(f"{i + 1:>5}  {plain:13.1f}  {agent:13.1f}  {cost:+6.1%}  {seen} steps")
    q = statistics.quantiles(costs, n=4) if len(costs) >= 2 else [costs[0]] * 3
    what = (" armed: " + args.arm if arm else "") + (" sampling its input phase" if args.sample else "")
    print(f"agent{what} (width {args.width}) cost: median {statistics.median(costs):+.2%} over {len(costs)} rounds; "
          f"min {min(costs):+.2%}, quartiles {q[0]:+.2%} .. {q[2]:+.2%}, max {max(costs):+.2%}")


if __name__ == "__main__":
    main()
