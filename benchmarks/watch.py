"""`fieldguide watch`: false alarms on a healthy job, time from a change to its event, and the
cost to the job side by side with the same job unwatched.

usage: python benchmarks/watch.py [--healthy-seconds 600] [--rounds 3] [--skip-healthy]
                                  [--skip-changes] [--skip-cost]

1. False alarms: the zoo's periodic_healthy (workers anew each epoch, an evaluation and a
   checkpoint at intervals) watched for --healthy-seconds, launched and attached; departures
   per hour.
2. Time to the event: each changing workload in each declared mode, the change 75 s in;
   seconds from the change to the departure detected, and to the event naming its cause.
3. Cost: bench_target.py's steps/s over the last 50 of 60 s, unwatched, launched under the
   watch, and attached to by the watch, in interleaved rounds; the median and spread of each.
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
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]
sys.path.insert(0, str(HERE.parent / "src"))

from fieldguide.workloads import changing  # noqa: E402


def events_of(folder: Path) -> list[dict]:
    path = folder / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def watched(name: str, mode: str, seconds: float, change_after: float) -> tuple[list[dict], float | None]:
    """Run the changing workload under the watch; its events and the change's wall-clock time."""
    declared = changing.watch_declarations()[name]
    work = Path(tempfile.mkdtemp(prefix="fg-bench-watch-"))
    mark = work / "changed-at"
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS=str(seconds), FIELDGUIDE_CHANGE_AFTER_S=str(change_after),
               FIELDGUIDE_CHANGE_MARK=str(mark), PYTHONUNBUFFERED="1")
    job = [sys.executable, *declared.python_args, str(changing.path(name))]
    options = ["watch", "--no-tui", "--report-dir", str(work / "out")]
    if mode == "launch":
        subprocess.run([*FIELDGUIDE, *options, "--", *job], env=env, capture_output=True, timeout=seconds + 180)
    else:
        proc = subprocess.Popen(job, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(4)
        subprocess.run([*FIELDGUIDE, *options, "--pid", str(proc.pid)], env=env, capture_output=True,
                       timeout=seconds + 180)
        proc.wait(timeout=60)
    changed = float(mark.read_text()) if mark.exists() else None
    return events_of(work / "out"), changed


def unix(event: dict) -> float:
    return datetime.fromisoformat(event["time"]).timestamp()


def false_alarms(seconds: float) -> None:
    print(f"## false alarms: periodic_healthy watched for {seconds:.0f} s")
    for mode in changing.watch_declarations()["periodic_healthy"].modes:
        events, _ = watched("periodic_healthy", mode, seconds, 1e9)
        alarms = [e for e in events if e["kind"] == "departing"]
        learned = next((e["baseline"] for e in events if e["kind"] == "baseline"), {})
        watching_s = events[-1]["t"] - next((e["t"] for e in events if e["kind"] == "baseline"), events[-1]["t"])
        print(f"  {mode:<7} {len(alarms)} departure(s) in {watching_s:.0f} s of watching "
              f"({len(alarms) / max(watching_s, 1) * 3600:.1f} per hour); baseline {learned}")
        for alarm in alarms:
            print(f"    at {alarm['t']:.0f} s: {[c['signal'] for c in alarm['changed']]}")


def time_to_event() -> None:
    print("## time from the change (75 s in) to the event, bundled rules")
    for name, declared in changing.watch_declarations().items():
        if declared.cause is None:
            continue
        for mode in declared.modes:
            events, changed = watched(name, mode, 160, 75)
            departing = next((e for e in events if e["kind"] == "departing"), None)
            departure = next((e for e in events if e["kind"] == "departure"), None)
            if changed is None or departure is None or departing is None:
                print(f"  {name:<16} {mode:<7} no event (changed: {changed is not None})")
                continue
            early = unix(departing) < changed
            print(f"  {name:<16} {mode:<7} detected {unix(departing) - changed:5.1f} s after the change, "
                  f"named {departure['cause']} {unix(departure) - changed:5.1f} s after it"
                  f"{'  (BEFORE THE CHANGE)' if early else ''}; signals {[c['signal'] for c in departing['changed']]}")


def steps_per_s(lines: list[str], skip_s: float = 10.0) -> float:
    rows = []
    for line in lines:
        text = line.strip().removeprefix("|").strip()
        if text.startswith("{"):
            try:
                row = json.loads(text)
                rows.append((row["t"], row["steps"]))
            except (ValueError, KeyError):
                continue
    rows = [r for r in rows if r[0] >= rows[0][0] + skip_s] if rows else []
    if len(rows) < 2:
        return float("nan")
    return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])


def one_cost_run(arm: str, seconds: float) -> float:
    target = [sys.executable, str(HERE / "bench_target.py")]
    env = dict(os.environ, BENCH_SECONDS=str(seconds), PYTHONUNBUFFERED="1")
    work = Path(tempfile.mkdtemp(prefix="fg-bench-cost-"))
    if arm == "unwatched":
        return steps_per_s(subprocess.run(target, env=env, capture_output=True, text=True).stdout.splitlines())
    if arm == "launched":
        proc = subprocess.run([*FIELDGUIDE, "watch", "--no-tui", "--show-output", "--report-dir", str(work), "--",
                               *target], env=env, capture_output=True, text=True, timeout=seconds + 60)
        return steps_per_s(proc.stderr.splitlines())
    job = subprocess.Popen(target, env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(2)
    watch = subprocess.Popen([*FIELDGUIDE, "watch", "--no-tui", "--pid", str(job.pid), "--report-dir", str(work)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, _ = job.communicate(timeout=seconds + 60)
    watch.wait(timeout=30)
    return steps_per_s(out.splitlines())


def cost(rounds: int, seconds: float) -> None:
    print(f"## cost to the job: bench_target.py steps/s over its last {seconds - 10:.0f} s, {rounds} interleaved rounds")
    arms = ("unwatched", "launched", "attached")
    rates: dict[str, list[float]] = {a: [] for a in arms}
    for _ in range(rounds):
        for arm in arms:
            rates[arm].append(one_cost_run(arm, seconds))
    free = statistics.median(rates["unwatched"])
    for arm in arms:
        values = rates[arm]
        med = statistics.median(values)
        print(f"  {arm:<10} median {med:7.1f} steps/s (rounds {', '.join(f'{v:.1f}' for v in values)}); "
              f"{(med / free - 1) * 100:+.1f}% against unwatched")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--healthy-seconds", type=float, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-healthy", action="store_true")
    parser.add_argument("--skip-changes", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    args = parser.parse_args()
    print(f"fieldguide watch benchmark, {os.cpu_count()} CPU cores, {time.strftime('%Y-%m-%d %H:%M')}")
    if not args.skip_cost:
        cost(args.rounds, 60)
    if not args.skip_changes:
        time_to_event()
    if not args.skip_healthy:
        false_alarms(args.healthy_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
