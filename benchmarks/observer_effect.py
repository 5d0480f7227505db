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
- launched: the job started with fieldguide's agent loaded, as `diagnose --` starts it; after
  WARM_S + QUIET_S of steps the walk runs (the Session the CLI and the TUI run) in this process.
The job's own clock judges, so the instrument's CPU, its GIL-holding and its wakeups all count.
Every arm: the window's mean step time against the same process's QUIET_S just before and just
after it (one process against itself: processes of the same job differ by several percent here).
A launched job's before and after carry the idle agent's hooks, so its figure is the walk's
cost on top of them; agent_hooks.py measures the hooks themselves (in one process, swapped in
and out) and `--hooks-us` adds them as a share of each job's step. A rank job's
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
        return run_launched(width, ranks, paths, log, playbook)
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


def run_launched(width: int, ranks: int, paths: list[Path], log: Path, playbook_id: str) -> Run:
    """The job launched with fieldguide's agent loaded, as `diagnose --` launches it (its hooks on
    from torch's import, the playbook's capabilities armed), QUIET_S of steps with the agent idle,
    then the walk (the same Session the CLI and the TUI run), then QUIET_S idle again: the walk's
    cost against the same process. What the idle agent's hooks cost every step is not in it:
    agent_hooks.py measures that inside one process, hooks swapped in and out."""
    from fieldguide.playbook import find_playbook
    from fieldguide.targets import LaunchTarget
    from fieldguide.walk.session import Session, launch_arm, launch_env

    playbook = find_playbook(playbook_id)
    env = dict(os.environ, OBSERVER_LOG=str(log), OBSERVER_WIDTH=str(width), OBSERVER_SECONDS="300")
    target = LaunchTarget(job_command(ranks), env=env, arm=launch_arm(playbook), extra_env=launch_env(playbook))
    try:
        first = wait_for_steps(paths)
        time.sleep(max(first + WARM_S + QUIET_S - time.monotonic(), 0.0))
        start = time.monotonic()
        Session(playbook, target).run()
        end = time.monotonic()
        time.sleep(QUIET_S)
    finally:
        target.close()
    return Run([read_clock(p) for p in paths], start, end)


def within_cost(run: Run) -> tuple[float, float] | None:
    """The window's mean step time over the same job's just before and just after it (QUIET_S each):
    a job's own baseline, free of the offsets between one process and the next. With it, that
    baseline step (seconds; the ranks' mean)."""
    costs, bases = [], []
    for ends in run.clocks:
        during = mean_step(ends, run.start, run.end)
        before = mean_step(ends, run.start - QUIET_S, run.start)
        after = mean_step(ends, run.end, run.end + QUIET_S)
        if during is None or before is None or after is None:
            return None
        bases.append((before + after) / 2)
        costs.append(during / bases[-1] - 1)
    return statistics.fmean(costs), statistics.fmean(bases)


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
    ap.add_argument("--hooks-us", type=float, default=None,
                    help="the idle agent's hooks, microseconds a step (agent_hooks.py): adds a launched+hooks row")
    args = ap.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    arms = [a for a in args.arms.split(",") if a]
    unknown = [j for j in jobs if j not in JOBS] + [a for a in arms if a not in ARMS]
    if unknown:
        sys.exit(f"observer_effect: unknown job or arm: {', '.join(unknown)}")
    order = ["plain", *[a for a in arms if a != "plain"]]
    costs: dict[tuple[str, str], list[float]] = {(j, a): [] for j in jobs for a in order}
    walls: dict[tuple[str, str], list[float]] = {(j, a): [] for j in jobs for a in order}
    if args.hooks_us is not None and "launched" in order:
        costs.update({(j, "launched+hooks"): [] for j in jobs})
        walls.update({(j, "launched+hooks"): [] for j in jobs})
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
            measured = {arm: within_cost(runs[arm]) for arm in order}
            for arm in order:
                span = runs[arm].end - runs[arm].start
                got = measured[arm]
                if got is not None:
                    costs[(job, arm)].append(got[0])
                    walls[(job, arm)].append(span)
                    if arm == "launched" and args.hooks_us is not None:
                        costs[(job, "launched+hooks")].append(got[0] + args.hooks_us * 1e-6 / got[1])
                        walls[(job, "launched+hooks")].append(span)
                line.append(f"{arm} {'n/a' if got is None else f'{got[0]:+.2%}'} ({span:.1f} s)")
            base = measured["plain"]
            shutil.rmtree(folder, ignore_errors=True)
            print(f"round {round_index + 1:>2} {job:>5}" + (f" ({base[1] * 1000:.2f} ms steps)" if base else "")
                  + ": " + ", ".join(line), flush=True)
    print("\njob    arm             median   quartiles            slower  sign p   window")
    for (job, arm), values in costs.items():
        if len(values) < 2:
            print(f"{job:<6} {arm:<14}  too few rounds ({len(values)})")
            continue
        q = statistics.quantiles(values, n=4)
        slower = sum(v > 0 for v in values)
        print(f"{job:<6} {arm:<14} {statistics.median(values):+7.2%}  {q[0]:+7.2%} .. {q[2]:+7.2%}  "
              f"{slower:>2}/{len(values):<3}  {sign_test(values):<7.3f}  {statistics.median(walls[(job, arm)]):.1f} s")


if __name__ == "__main__":
    main()
