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

FIELDGUIDE = str(Path(sys.executable).with_name("fieldguide"))
# The floor: a Textual app that draws one line, in the same harness (Python, Textual, the terminal).
MINIMAL_APP = """
from textual.app import App
from textual.widgets import Static
class Minimal(App):
    BINDINGS = [("q", "quit", "Quit")]
    def compose(self):
        yield Static("a minimal Textual app")
Minimal().run()
"""
CASES = {
    "minimal Textual app": ([sys.executable, "-c", MINIMAL_APP], b"a minimal Textual app"),
    "picker (fieldguide)": ([FIELDGUIDE], b"What should fieldguide diagnose?"),
    "walk (fieldguide demo)": ([FIELDGUIDE, "demo"], b"env.debug-flags"),
}
FLOOR = "minimal Textual app"
BUDGET_S = 0.5  # each first screen's median
OWN_BUDGET_S = 0.1  # fieldguide's own share: its median over the minimal app's


def maps_torch(pid: int) -> bool:
    try:
        return any("/torch/lib/libtorch" in line or "/torch/_C" in line for line in Path(f"/proc/{pid}/maps").open())
    except OSError:
        return False


def one_run(argv: list[str], marker: bytes, timeout: float = 15.0) -> tuple[float, bool]:
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", LINES="24", FIELDGUIDE_WORKLOAD_SECONDS="30")
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
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
            raise SystemExit(f"no first screen within {timeout:.0f} s for `{' '.join(argv)[:80]}`")
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
    print(f"fieldguide TUI startup, {args.runs} runs each (the cases interleaved), 80x24 pty, "
          f"{os.cpu_count()} CPU cores")
    times: dict[str, list[float]] = {name: [] for name in CASES}
    torch_seen: dict[str, bool] = dict.fromkeys(CASES, False)
    for _ in range(args.runs):
        for name, (argv, marker) in CASES.items():
            drawn, torch_loaded = one_run(argv, marker)
            times[name].append(drawn)
            torch_seen[name] |= torch_loaded
    floor = statistics.median(times[FLOOR])
    worst = own_worst = 0.0  # the slowest median; fieldguide's largest share over the floor
    for name, taken in times.items():
        median = statistics.median(taken)
        line = (f"  {name:<24} first screen: median {median * 1000:6.0f} ms, "
                f"min {min(taken) * 1000:6.0f} ms, max {max(taken) * 1000:6.0f} ms")
        if name != FLOOR:
            worst = max(worst, median)
            own_worst = max(own_worst, median - floor)
            line += f"; over the minimal app {(median - floor) * 1000:+.0f} ms; torch in the TUI process: " + (
                "YES" if torch_seen[name] else "no")
        print(line)
        if torch_seen[name] and name != FLOOR:
            print("  FAIL: the TUI process mapped torch", file=sys.stderr)
            return 1
    ok = worst < BUDGET_S and own_worst < OWN_BUDGET_S
    print(f"  slowest median first screen {worst * 1000:.0f} ms (budget {BUDGET_S * 1000:.0f}); fieldguide's own "
          f"share {own_worst * 1000:.0f} ms (budget {OWN_BUDGET_S * 1000:.0f}): {'within' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
