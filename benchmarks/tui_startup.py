"""How fast the TUI draws its first screen, and proof that its process never loads torch.

    .venv/bin/python benchmarks/tui_startup.py [--runs 5]

Starts the real `fieldguide` command in a pseudo-terminal (80x24, as over SSH) and times
from spawn to the first screen on the terminal: the target picker for `fieldguide`, and the
walk screen for `fieldguide demo`. It then reads /proc/PID/maps of the fieldguide process
for torch's native library (the launched demo job has torch; fieldguide must not), and
quits with `q`. The target: each first screen's median under 0.5 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import select
import statistics
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

FIELDGUIDE = Path(sys.executable).with_name("fieldguide")
CASES = {
    "picker (fieldguide)": ([], b"What should fieldguide diagnose?"),
    "walk (fieldguide demo)": (["demo"], b"env.debug-flags"),
}
BUDGET_S = 0.5  # each first screen's median


def maps_torch(pid: int) -> bool:
    try:
        return any("/torch/lib/libtorch" in line or "/torch/_C" in line for line in Path(f"/proc/{pid}/maps").open())
    except OSError:
        return False


def one_run(args: list[str], marker: bytes, timeout: float = 15.0) -> tuple[float, bool]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24", FIELDGUIDE_WORKLOAD_SECONDS="30")
    started = time.perf_counter()
    proc = subprocess.Popen([str(FIELDGUIDE), *args], stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True, close_fds=True)
    os.close(slave)
    seen = b""
    drawn = None
    try:
        while time.perf_counter() - started < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
                if marker in seen:
                    drawn = time.perf_counter() - started
                    break
        if drawn is None:
            raise SystemExit(f"no first screen within {timeout:.0f} s for `fieldguide {' '.join(args)}`")
        time.sleep(0.3)
        torch_loaded = maps_torch(proc.pid)
        os.write(master, b"q")
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            select.select([master], [], [], 0.1)
            try:
                os.read(master, 65536)  # keep draining, so the app is never blocked writing
            except OSError:
                break
        return drawn, torch_loaded
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"fieldguide TUI startup, {args.runs} runs each, 80x24 pty, {os.cpu_count()} CPU cores")
    worst = 0.0  # the slowest median
    for name, (argv, marker) in CASES.items():
        times, torch_seen = [], False
        for _ in range(args.runs):
            drawn, torch_loaded = one_run(argv, marker)
            times.append(drawn)
            torch_seen |= torch_loaded
        worst = max(worst, statistics.median(times))
        print(f"  {name:<24} first screen: median {statistics.median(times) * 1000:6.0f} ms, "
              f"min {min(times) * 1000:6.0f} ms, max {max(times) * 1000:6.0f} ms; "
              f"torch in the TUI process: {'YES' if torch_seen else 'no'}")
        if torch_seen:
            print("  FAIL: the TUI process mapped torch", file=sys.stderr)
            return 1
    verdict = "within" if worst < BUDGET_S else "OVER"
    print(f"  slowest median first screen {worst * 1000:.0f} ms: {verdict} the {BUDGET_S:.1f} s budget")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
