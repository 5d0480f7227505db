"""What measuring costs the job: the job's own step clock, plain and under each instrument.

usage: python benchmarks/observer_effect.py [--rounds 12] [--jobs 1ms,5ms,15ms,ddp2,ddp4]
                                            [--arms plain,launched,attached,pyspy] [--playbook slow-training]

Jobs (benchmarks/observer_job.py, one intra-op thread each): MLPs at ~1, ~5 and ~15 ms steps on
the 2-core box, and a 2- and a 4-rank gloo DDP job under torchrun (4 ranks: more ranks than cores).
Each round runs four arms of every job, one at a time, in a rotating order:
- plain: the job alone; a PYSPY_S window in which nothing runs (a null control: what the
  estimate reads when there is nothing to find);
- attached: `fieldguide diagnose --pid` from WARM_S + QUIET_S after the job's first step;
- pyspy: `py-spy record --nonblocking -r 100 -d PYSPY_S` the same way (the peer);
- launched: `fieldguide diagnose -- <job>`: its window runs from WARM_S after the first step to the
  walk's end.
The job's own clock judges, so the instrument's CPU, its GIL-holding and its wakeups all count.
plain, attached, pyspy: the window's mean step time against the same process's QUIET_S just
before and just after it (one process against itself: processes of the same job differ by
several percent here). launched has no stretch without the agent: its window against the plain
run of the same round over the same span since the first step, so it is noisier. A rank job's
cost is the mean of its ranks'. Printed per job and arm: the median over rounds, quartiles, how
many rounds cost more than plain, and a two-sided sign test.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "observer_job.py"
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]
QUIET_S = 6.0  # the job alone before and after an instrument's window
WARM_S = 2.0
PYSPY_S = 8
JOBS = {  # name: (width, ranks)
    "1ms": (256, 1), "5ms": (768, 1), "15ms": (1400, 1), "ddp2": (768, 2), "ddp4": (512, 4),
}
ARMS = ("plain", "launched", "attached", "pyspy")


@dataclass
class Run:
    clocks: list[list[float]]  # each rank's step ends
    start: float  # the instrument's window
    end: float


def job_command(ranks: int) -> list[str]:
    if ranks == 1:
        return [sys.executable, str(JOB)]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port",
            str(29500 + os.getpid() % 1000), str(JOB)]


def read_clock(path: Path) -> list[float]:
    try:
        return [float(line) for line in path.read_text().split()]
    except (OSError, ValueError):
        return []


def logs(base: Path, ranks: int) -> list[Path]:
    return [base] if ranks == 1 else [Path(f"{base}.rank{r}") for r in range(ranks)]


def mean_step(ends: list[float], start: float, stop: float) -> float | None:
    inside = [t for t in ends if start <= t <= stop]
    if len(inside) < 5:
        return None
    return (inside[-1] - inside[0]) / (len(inside) - 1)


def wait_for_steps(paths: list[Path], timeout: float = 60.0) -> float:
    """The moment every rank has logged a step; the earliest first step among them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        clocks = [read_clock(p) for p in paths]
        if all(clocks):
            return min(c[0] for c in clocks)
        time.sleep(0.1)
    raise RuntimeError(f"the job logged no step in {timeout:.0f} s")


def end_job(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_job(width: int, ranks: int, log: Path, seconds: float) -> subprocess.Popen[bytes]:
    env = dict(os.environ, OBSERVER_LOG=str(log), OBSERVER_WIDTH=str(width), OBSERVER_SECONDS=str(seconds))
    return subprocess.Popen(job_command(ranks), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def run_arm(arm: str, width: int, ranks: int, folder: Path, playbook: str) -> Run:
    """One run of the job under `arm`: every rank's step ends, and the window the instrument ran in."""
    log = folder / f"{arm}.log"
    paths = logs(log, ranks)
    if arm == "launched":
        env = dict(os.environ, OBSERVER_LOG=str(log), OBSERVER_WIDTH=str(width), OBSERVER_SECONDS="300")
        cmd = [*FIELDGUIDE, "diagnose", "--playbook", playbook, "--report", str(folder / "launched.json"),
               "--", *job_command(ranks)]
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=400)
        end = time.monotonic()
        clocks = [read_clock(p) for p in paths]
        first = min(c[0] for c in clocks if c) if any(clocks) else end
        return Run(clocks, first + WARM_S, end)
    proc = start_job(width, ranks, log, 300)
    try:
        first = wait_for_steps(paths)
        time.sleep(max(first + WARM_S + QUIET_S - time.monotonic(), 0.0))
        start = time.monotonic()
        if arm == "plain":
            time.sleep(PYSPY_S)  # nothing runs: the same split, as a null control
        elif arm == "attached":
            subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", playbook, "--pid", str(proc.pid),
                            "--report", str(folder / "attached.json")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=400)
        else:
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            cmd = [spy, "record", "--pid", str(proc.pid), "--nonblocking", "--rate", "100", "--duration",
                   str(PYSPY_S), "--format", "raw", "--output", str(folder / "pyspy.txt")]
            if ranks > 1:
                cmd.append("--subprocesses")
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=400)
        end = time.monotonic()
        time.sleep(QUIET_S)
    finally:
        end_job(proc)
    return Run([read_clock(p) for p in paths], start, end)


def within_cost(run: Run) -> float | None:
    """The window's mean step time over the same job's just before and just after it (QUIET_S each):
    a job's own baseline, free of the offsets between one process and the next."""
    costs = []
    for ends in run.clocks:
        during = mean_step(ends, run.start, run.end)
        before = mean_step(ends, run.start - QUIET_S, run.start)
        after = mean_step(ends, run.end, run.end + QUIET_S)
        if during is None or before is None or after is None:
            return None
        costs.append(during / ((before + after) / 2) - 1)
    return statistics.fmean(costs)


def launched_cost(run: Run, plain: Run) -> float | None:
    """A launched job has no uninstrumented stretch: its window against the plain run of the same
    round over the same span since the first step (between two processes, so noisier)."""
    costs = []
    for ends, plain_ends in zip(run.clocks, plain.clocks, strict=True):
        if not ends or not plain_ends:
            return None
        offset_start, offset_end = run.start - ends[0], min(run.end, ends[-1]) - ends[0]
        measured = mean_step(ends, run.start, run.end)
        p0 = plain_ends[0]
        reference = mean_step(plain_ends, p0 + offset_start, min(p0 + offset_end, plain_ends[-1]))
        if measured is None or reference is None:
            return None
        costs.append(measured / reference - 1)
    return statistics.fmean(costs)


def sign_test(costs: list[float]) -> float:
    """Two-sided p that as many rounds as this fall on one side by chance."""
    n = len(costs)
    k = max(sum(c > 0 for c in costs), sum(c < 0 for c in costs))
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--playbook", default="slow-training")
    args = ap.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    arms = [a for a in args.arms.split(",") if a]
    unknown = [j for j in jobs if j not in JOBS] + [a for a in arms if a not in ARMS]
    if unknown:
        sys.exit(f"observer_effect: unknown job or arm: {', '.join(unknown)}")
    order = ["plain", *[a for a in arms if a != "plain"]]
    costs: dict[tuple[str, str], list[float]] = {(j, a): [] for j in jobs for a in order}
    walls: dict[tuple[str, str], list[float]] = {(j, a): [] for j in jobs for a in order}
    print(f"observer effect: {args.rounds} rounds, jobs {', '.join(jobs)}, arms {', '.join(order)}, "
          f"playbook {args.playbook}; load {os.getloadavg()[0]:.1f}", flush=True)
    for round_index in range(args.rounds):
        for job in jobs:
            width, ranks = JOBS[job]
            folder = Path(tempfile.mkdtemp(prefix="fgobs-"))
            runs = {}
            turn = round_index % len(order)
            for arm in order[turn:] + order[:turn]:
                runs[arm] = run_arm(arm, width, ranks, folder, args.playbook)
            line = []
            for arm in order:
                run = runs[arm]
                cost = launched_cost(run, runs["plain"]) if arm == "launched" else within_cost(run)
                span = run.end - run.start
                if cost is not None:
                    costs[(job, arm)].append(cost)
                    walls[(job, arm)].append(span)
                line.append(f"{arm} {'n/a' if cost is None else f'{cost:+.2%}'} ({span:.1f} s)")
            shutil.rmtree(folder, ignore_errors=True)
            print(f"round {round_index + 1:>2} {job:>5}: " + ", ".join(line), flush=True)
    print("\njob    arm        median   quartiles            slower  sign p   window")
    for (job, arm), values in costs.items():
        if len(values) < 2:
            print(f"{job:<6} {arm:<9}  too few rounds ({len(values)})")
            continue
        q = statistics.quantiles(values, n=4)
        slower = sum(v > 0 for v in values)
        print(f"{job:<6} {arm:<9} {statistics.median(values):+7.2%}  {q[0]:+7.2%} .. {q[2]:+7.2%}  "
              f"{slower:>2}/{len(values):<3}  {sign_test(values):<7.3f}  {statistics.median(walls[(job, arm)]):.1f} s")


if __name__ == "__main__":
    main()
