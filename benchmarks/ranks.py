"""What fieldguide costs a multi-rank job, and how long a walk over 2 ranks takes next to 1.

usage: python benchmarks/ranks.py [--rounds 3] [--repeat 3] [--skip-cost] [--skip-walks]
                                 [--skip-nodes] [--device-wait-ms 0 10]

1. Cost to each rank while attached: one run of bench_ddp_target.py (2 gloo ranks under
   torchrun); each rank's steps/s in windows while nothing is attached versus windows while
   `fieldguide diagnose --playbook slow-training --no-tui --pid <launcher>` walks it,
   interleaved (free, walk, free, walk, ..., free), `--rounds` walks. Per rank: the median
   free and attached rates with their min-max over windows, the slowdown of the medians, and
   the spread of the slowdown of each attached window against the free windows either side;
   and the CPU seconds each walk used (fieldguide and its py-spy samplers). With
   `--device-wait-ms W` each rank's step also sleeps W ms, off the CPU, as a rank waits on its
   GPU: on a GPU node the ranks do not fill every core, as they do here without it.
2. Walk time over 2 ranks vs 1, the zoo's ddp_healthy.py (it runs on one rank too: world size
   1, DDP and its all-reduce are no-ops across ranks, each rank's step is the same work):
   - launch mode, including the job's start: `fieldguide diagnose ... -- python -m
     torch.distributed.run --nproc-per-node {2,1} ddp_healthy.py`;
   - attach mode, the walk alone on a job already training: to the launcher of the 2-rank job,
     and to the one training process of the 1-rank job (fieldguide does not treat a world of 1
     as ranks: attached to that launcher, it would walk the launcher itself).
   `--repeat` walks of each, interleaved (the order alternates); medians and min-max.
3. Walk time over 2 nodes vs 1 node, launch mode, the same 2 ranks of ddp_healthy.py: torchrun
   `--nnodes 2 --nproc-per-node 1` (a static rendezvous on 127.0.0.1) with one fieldguide per
   node at once, as on a cluster, until both reports are written; against one node of 2 ranks.
   `--repeat` of each, interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
TARGET = HERE / "bench_ddp_target.py"
FIELDGUIDE = [sys.executable, "-m", "fieldguide"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def read_rates(proc: subprocess.Popen[str], out: list[tuple[float, int, int]]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and {"t", "steps", "rank"} <= row.keys():
            out.append((row["t"], row["steps"], row["rank"]))


def rate_between(rows: list[tuple[float, int, int]], rank: int, t0: float, t1: float) -> float:
    inside = [r for r in list(rows) if r[2] == rank and t0 <= r[0] <= t1]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def end_job(proc: subprocess.Popen, ranks: list[int]) -> None:
    """Kill the launcher outright; its ranks end on their own (they watch it). Any rank still
    there 5 s later is killed by its pid."""
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    left = list(ranks)
    while left and time.monotonic() < deadline:
        left = [p for p in left if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            print(f"  (rank pid {pid} outlived its launcher: killed)")
        except ProcessLookupError:
            pass


def rank_pids(launcher: int, timeout: float = 30) -> list[int]:
    """The launcher's children that are ranks (RANK in their environment), once they exist."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = []
        try:
            for child in psutil.Process(launcher).children(recursive=True):
                try:
                    if "RANK" in child.environ():
                        found.append(child.pid)
                except psutil.Error:
                    pass
        except psutil.Error:
            return []
        if found:
            return found
        time.sleep(0.2)
    return []


def walk_summary(report: Path) -> str:
    if not report.exists():
        return "no report"
    data = json.loads(report.read_text())
    got = (data.get("first_departure") or {}).get("cause") or data.get("conclusion")
    ranks = len(data.get("ranks") or []) or 1
    dist_s = sum(n.get("seconds") or 0 for n in data.get("path") or [] if str(n.get("node", "")).startswith("dist."))
    return f"{data.get('verdict')} {got}, {ranks} rank{'s' if ranks > 1 else ''}, dist nodes {dist_s:.1f} s"


def attach_cost(rounds: int, device_wait_ms: float = 0.0) -> None:
    waits = f", each step waiting {device_wait_ms:.0f} ms off the CPU as on a device" if device_wait_ms else \
        ", the ranks on the CPU all the time"
    print(f"## cost to each rank while a walk is attached (one 2-rank run{waits}; windows free vs attached)")
    window = 15.0
    proc = subprocess.Popen([*TORCHRUN, "--nproc-per-node", "2", str(TARGET)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, BENCH_SECONDS=str(60 * rounds + 90),
                                     BENCH_DEVICE_WAIT_MS=str(device_wait_ms)))
    rows: list[tuple[float, int, int]] = []
    threading.Thread(target=read_rates, args=(proc, rows), daemon=True).start()
    ranks = rank_pids(proc.pid)
    time.sleep(8)  # warm up
    folder = Path(tempfile.mkdtemp(prefix="fgbench-"))
    free: dict[int, list[float]] = {0: [], 1: []}
    attached: dict[int, list[float]] = {0: [], 1: []}
    walks = []
    cpu = []  # CPU seconds of each walk: fieldguide and the samplers it ran (reaped children)

    def free_window() -> None:
        t0 = time.monotonic()
        time.sleep(window)
        for r in (0, 1):
            free[r].append(rate_between(rows, r, t0 + 1, time.monotonic()))

    try:
        for i in range(rounds):
            free_window()
            report = folder / f"attach-{i}.json"
            t0, used0 = time.monotonic(), children_cpu()
            subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--report",
                            str(report), "--pid", str(proc.pid)], capture_output=True, timeout=300)
            t1 = time.monotonic()
            cpu.append((children_cpu() - used0, t1 - t0))
            for r in (0, 1):
                attached[r].append(rate_between(rows, r, t0, t1))
            walks.append(f"{t1 - t0:.1f} s ({walk_summary(report)})")
        free_window()
    finally:
        end_job(proc, ranks)
    print(f"walks: {'; '.join(walks)}")
    print("fieldguide's own CPU per walk (it and its py-spy samplers): "
          + ", ".join(f"{c:.2f} CPU-s over {w:.1f} s ({c / w:.0%} of one core)" for c, w in cpu))
    for r in (0, 1):
        f, a = free[r], attached[r]
        fm, am = statistics.median(f), statistics.median(a)
        # each attached window against the mean of the free windows either side of it
        pairs = [1 - a[i] / ((f[i] + f[i + 1]) / 2) for i in range(len(a))]
        print(f"rank {r}: free {fm:.1f} steps/s ({min(f):.1f}-{max(f):.1f}; {', '.join(f'{x:.1f}' for x in f)}), "
              f"attached {am:.1f} ({min(a):.1f}-{max(a):.1f}; {', '.join(f'{x:.1f}' for x in a)})")
        print(f"rank {r}: slowdown while attached {1 - am / fm:+.1%} (median of medians); per walk "
              f"{', '.join(f'{p:+.1%}' for p in pairs)}; free windows span "
              f"{(max(f) - min(f)) / fm:.1%} of their median")


def children_cpu() -> float:
    """CPU seconds of this process's reaped children and theirs (fieldguide reaps its samplers)."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def launch_walk(nproc: int) -> tuple[float, str]:
    report = Path(tempfile.mkdtemp(prefix="fgbench-")) / "r.json"
    from fieldguide import workloads

    t0 = time.monotonic()
    subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--report", str(report),
                    "--", *TORCHRUN, "--nproc-per-node", str(nproc), str(workloads.path("ddp_healthy"))],
                   capture_output=True, text=True, env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="200"),
                   timeout=400)
    return time.monotonic() - t0, walk_summary(report)


def attach_walk(nproc: int) -> tuple[float, str]:
    """Start the job, wait until it trains, then time the attached walk alone."""
    from fieldguide import workloads

    report = Path(tempfile.mkdtemp(prefix="fgbench-")) / "r.json"
    proc = subprocess.Popen([*TORCHRUN, "--nproc-per-node", str(nproc), str(workloads.path("ddp_healthy"))],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="200"))
    ranks = rank_pids(proc.pid)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # rank 0 prints "step N ..." every 1.5 s once it trains
            if line.startswith("step "):
                break
        threading.Thread(target=lambda: proc.stdout.read(), daemon=True).start()  # type: ignore[union-attr]
        time.sleep(2)
        pid = proc.pid if nproc > 1 else ranks[0]
        t0 = time.monotonic()
        subprocess.run([*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--report", str(report),
                        "--pid", str(pid)], capture_output=True, text=True, timeout=300)
        seconds = time.monotonic() - t0
    finally:
        end_job(proc, ranks)
    return seconds, walk_summary(report)


def side_by_side(name_a: str, a: list[float], name_b: str, b: list[float]) -> str:
    """Two arms' medians with their min-max, their ratio and each interleaved pair's."""
    ma, mb = statistics.median(a), statistics.median(b)
    return (f"{name_a} median {ma:.1f} s ({min(a):.1f}-{max(a):.1f}), {name_b} median {mb:.1f} s "
            f"({min(b):.1f}-{max(b):.1f}): {ma / mb:.2f}x "
            f"(pairs {', '.join(f'{x / y:.2f}x' for x, y in zip(a, b, strict=True))})")


def nodes_walk(nodes: int) -> tuple[float, str]:
    """Launch-mode walks of 2 ranks of ddp_healthy.py on `nodes` nodes of this machine, one
    fieldguide per node at once: the time until the last report is written."""
    import socket

    from fieldguide import workloads

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    folder = Path(tempfile.mkdtemp(prefix="fgbench-"))
    per_node = 2 // nodes
    t0 = time.monotonic()
    walks = []
    for node in range(nodes):
        where = ["--nnodes", str(nodes), "--node-rank", str(node), "--master-addr", "127.0.0.1",
                 "--master-port", str(port)] if nodes > 1 else []
        walks.append(subprocess.Popen(
            [*FIELDGUIDE, "diagnose", "--playbook", "slow-training", "--no-tui", "--report", str(folder / f"n{node}.json"),
             "--", *TORCHRUN, *where, "--nproc-per-node", str(per_node), str(workloads.path("ddp_healthy"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="200")))
    for walk in walks:
        walk.wait(timeout=400)
    return time.monotonic() - t0, "; ".join(walk_summary(folder / f"n{node}.json") for node in range(nodes))


def node_times(repeat: int) -> None:
    print("## walk over 2 nodes of 1 rank (one fieldguide per node, at once) vs 1 node of 2 ranks, launch mode")
    times: dict[int, list[float]] = {2: [], 1: []}
    for i in range(repeat):
        for nodes in ((2, 1) if i % 2 == 0 else (1, 2)):
            seconds, summary = nodes_walk(nodes)
            times[nodes].append(seconds)
            print(f"  {nodes} node{'s' if nodes > 1 else ''}: {seconds:5.1f} s  ({summary})")
    print(side_by_side("2 nodes", times[2], "1 node", times[1]))


def walk_times(repeat: int) -> None:
    print("## walk over 2 ranks vs 1 (ddp_healthy.py under torchrun), interleaved")
    for mode, walk, what in (("launch", launch_walk, "including the job's start"),
                             ("attach", attach_walk, "the walk alone: 2 ranks via their launcher, 1 rank's process")):
        times: dict[int, list[float]] = {2: [], 1: []}
        for i in range(repeat):
            for nproc in ((2, 1) if i % 2 == 0 else (1, 2)):
                seconds, summary = walk(nproc)
                times[nproc].append(seconds)
                print(f"  {mode} {nproc} rank{'s' if nproc > 1 else ''}: {seconds:5.1f} s  ({summary})")
        print(f"{mode} ({what}): " + side_by_side("2 ranks", times[2], "1 rank", times[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-cost", action="store_true")
    ap.add_argument("--skip-walks", action="store_true")
    ap.add_argument("--skip-nodes", action="store_true")
    ap.add_argument("--device-wait-ms", type=float, nargs="+", default=[0.0],
                    help="one cost run per value: each rank's step also sleeps this long (a device's wait)")
    args = ap.parse_args()
    print(f"{psutil.cpu_count()} cores; load average at start {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    t0 = time.monotonic()
    if not args.skip_cost:
        for wait in args.device_wait_ms:
            attach_cost(args.rounds, wait)
    if not args.skip_walks:
        walk_times(args.repeat)
    if not args.skip_nodes:
        node_times(args.repeat)
    print(f"load average at the end {', '.join(f'{x:.2f}' for x in os.getloadavg())}; {time.monotonic() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
