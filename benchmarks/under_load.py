"""Whether a verdict survives a busy machine: the zoo and the shared cases walked quiet and under load.

usage: python benchmarks/under_load.py [--set zoo|cases|both] [--conditions quiet,busy-core,two-walks,neighbour,oversubscribed]
                                      [--repeat 1] [--only NAME ...] [--modes launch,attach]
                                      [--cases-manifest ../shared/cases/cases.toml] [--json OUT]

Conditions:
- quiet: nothing else runs;
- busy-core: a process spinning on one core, pinned there (another user's job on the node);
- two-walks: every walk runs beside a second walk of the same target kind (two engineers
  diagnosing at once, or two ranks' walks);
- neighbour: a CPU-bound training job whose DataLoader workers fill the cores runs beside
  (the zoo's loader_augment_workers: two workers, as many as this project's 2-core machines have);
- oversubscribed: five busy loops, not pinned (on 2 cores beside a 2-rank job, a thread of the
  job waits for a core over half of each window).

Each walk is scored against what its workload (or case) declares: right; a flip (a confident
wrong answer: another cause, a cause for a healthy job, clean for a faulty one); or can't tell
(inconclusive: the walk declined to judge, or could not measure). Printed per set and condition:
walks, right, flips, can't tell, and the median walk time. Target: no flips; can't tell under 10%.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fieldguide.host.kill import kill_tree

FIELDGUIDE = [sys.executable, "-m", "fieldguide"]
# The default zoo set: one workload per cause family of slow-training, and a healthy one; the
# starved loader and the healthy one in both modes. `--only` picks others.
ZOO = ("loader_remote_reads", "loader_decode_cpu", "checkpoint_every_step", "tiny_ops_loop", "healthy_mlp",
       "worker_restart_epochs", "leak_cache_dict")
CONDITIONS = ("quiet", "busy-core", "two-walks", "neighbour", "oversubscribed")
OVERSUBSCRIBING_LOOPS = 5  # unpinned busy loops: with a 2-rank job, about 3.5 runnable threads per core
SPIN = "import os\nos.sched_setaffinity(0, {%d})\nwhile True:\n    pass\n"


@contextlib.contextmanager
def condition(name: str) -> Iterator[None]:
    """The load a condition puts beside the walks, for as long as they run."""
    procs: list[subprocess.Popen[bytes]] = []
    if name == "busy-core":
        core = min(os.sched_getaffinity(0))
        procs.append(subprocess.Popen([sys.executable, "-c", SPIN % core], start_new_session=True))
    elif name == "oversubscribed":
        procs += [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)
                  for _ in range(OVERSUBSCRIBING_LOOPS)]
    elif name == "neighbour":
        from fieldguide import workloads

        procs.append(subprocess.Popen([sys.executable, str(workloads.path("loader_augment_workers"))],
                                      env=dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="100000"),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        time.sleep(8)  # its workers started and busy
    try:
        yield
    finally:
        for proc in procs:
            kill_tree(proc)


def score(data: dict | None, cause: str | None, verdict: str) -> str:
    """right, flip or can't tell, for a report against what was declared."""
    if data is None:
        return "can't tell"
    got, got_verdict = (data.get("first_departure") or {}).get("cause"), data.get("verdict")
    if got_verdict == verdict and (got or None) == (cause or None):
        return "right"
    if got_verdict == "inconclusive":
        return "can't tell"
    return "flip"


def zoo_walk(name: str, mode: str) -> tuple[str, float, str]:
    """One walk of a zoo workload: (score, seconds, what it said)."""
    from fieldguide import workloads

    declared = workloads.declarations()[name]
    folder = Path(tempfile.mkdtemp(prefix="fgload-"))
    report = folder / "r.json"
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS="240")
    cmd = [*FIELDGUIDE, "diagnose", "--playbook", declared.playbook, "--no-tui", "--report", str(report)]
    job = [sys.executable, *declared.python_args, str(workloads.path(name))]
    target = None
    started = time.monotonic()
    try:
        if mode == "launch":
            subprocess.run([*cmd, "--", *job], env=env, capture_output=True, timeout=400)
        else:
            target = subprocess.Popen(job, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
            time.sleep(10)
            subprocess.run([*cmd, "--pid", str(target.pid)], env=env, capture_output=True, timeout=400)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if target is not None:
            kill_tree(target)  # torchrun's ranks too: each is in a session of its own
    seconds = time.monotonic() - started
    data = json.loads(report.read_text()) if report.exists() else None
    said = "no report" if data is None else \
        f"{data.get('verdict')} {(data.get('first_departure') or {}).get('cause') or data.get('conclusion') or ''}"
    return score(data, declared.cause, declared.verdict), seconds, said.strip()


def zoo_rows(names: list[str], modes: list[str], twice: bool) -> list[dict]:
    from fieldguide import workloads

    rows = []
    for name in names:
        for mode in modes:
            if mode not in workloads.declarations()[name].modes:
                continue
            with ThreadPoolExecutor(max_workers=2) as pool:
                walks = [pool.submit(zoo_walk, name, mode) for _ in range(2 if twice else 1)]
                for walk in walks:
                    verdict, seconds, said = walk.result()
                    rows.append({"case": name, "mode": mode, "score": verdict, "seconds": round(seconds, 1),
                                 "said": said})
                    print(f"  {verdict:<10} {name} [{mode}] {seconds:.0f} s: {said}", flush=True)
    return rows


def case_rows(manifest: Path, modes: list[str], twice: bool, only: list[str] | None = None) -> list[dict]:
    """The shared cases through their own runner (its --json, one run per `only` file), scored the same way."""
    rows = []
    for name in only or [None]:
        rows += _case_run(manifest, modes, twice, name)
    return rows


def _case_run(manifest: Path, modes: list[str], twice: bool, only: str | None) -> list[dict]:
    runner = manifest.with_name("run.py")
    outs = [Path(tempfile.mkdtemp(prefix="fgload-")) / "cases.json" for _ in range(2 if twice else 1)]
    mode = modes[0] if len(modes) == 1 else "both"
    env = dict(os.environ, FIELDGUIDE=shlex.join(FIELDGUIDE))
    picked = ["--only", only] if only else []
    procs = [subprocess.Popen([sys.executable, str(runner), str(manifest), "--mode", mode, *picked, "--json", str(out)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for out in outs]
    for proc in procs:
        proc.wait()
    rows = []
    for out in outs:
        for r in json.loads(out.read_text()) if out.exists() else []:
            if r.get("ok"):
                verdict = "right"
            elif r.get("verdict") == "inconclusive" or "got" not in r:
                verdict = "can't tell"
            else:
                verdict = "flip"
            rows.append({"case": r["file"], "mode": r["mode"], "score": verdict, "seconds": r.get("secs"),
                         "said": r.get("why", "")})
            print(f"  {verdict:<10} {r['file']} [{r['mode']}] {r.get('secs')} s {r.get('why', '')}", flush=True)
    return rows


def summary(rows: list[dict]) -> str:
    walks = len(rows)
    if not walks:
        return "no walks"
    right, flips, unsure = (sum(r["score"] == k for r in rows) for k in ("right", "flip", "can't tell"))
    seconds = [r["seconds"] for r in rows if isinstance(r.get("seconds"), (int, float))]
    median = f"; median walk {statistics.median(seconds):.0f} s" if seconds else ""
    return (f"{walks} walks: {right} right, {flips} flips ({flips / walks:.0%}), "
            f"{unsure} can't tell ({unsure / walks:.0%}){median}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=("zoo", "cases", "both"), default="zoo")
    parser.add_argument("--conditions", default=",".join(CONDITIONS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--modes", default="launch,attach")
    parser.add_argument("--cases-manifest", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "cases" / "cases.toml")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = args.modes.split(",")
    chosen = [c for c in args.conditions.split(",") if c]
    unknown = [c for c in chosen if c not in CONDITIONS]
    if unknown:
        parser.error(f"unknown condition {unknown[0]}; one of {', '.join(CONDITIONS)}")
    sets = ["zoo", "cases"] if args.set == "both" else [args.set]
    results: dict[str, list[dict]] = {}
    for name in chosen:
        for which in sets:
            key = f"{which} / {name}"
            print(f"## {key}", flush=True)
            rows: list[dict] = []
            for _ in range(args.repeat):
                with condition(name):
                    if which == "zoo":
                        rows += zoo_rows(list(args.only or ZOO), modes, name == "two-walks")
                    else:
                        rows += case_rows(args.cases_manifest, modes, name == "two-walks", args.only)
            results[key] = rows
            print(f"   {summary(rows)}", flush=True)
    print("\n## summary")
    for key, rows in results.items():
        print(f"{key:<24} {summary(rows)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
