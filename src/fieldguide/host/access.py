"""Whether fieldguide may read a process from outside: py-spy, the kernel's ptrace rules, and
whether the process is Python at all. Read-only: nothing here touches the process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

from fieldguide.errors import BadInput

CAP_SYS_PTRACE = 19
YAMA_SCOPE_FILE = Path("/proc/sys/kernel/yama/ptrace_scope")


def py_spy_path() -> str | None:
    """py-spy from PATH, else the one installed beside this interpreter."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else None


def py_spy_dump(pid: int, *flags: str, timeout: float = 15.0) -> subprocess.CompletedProcess[str] | None:
    """One `py-spy dump` of `pid` with `flags` (`--nonblocking`, `--locals`), lowered and its output
    captured; None without py-spy. TimeoutExpired past `timeout` (the dump is killed)."""
    from fieldguide.host import samplers

    spy = py_spy_path()
    if spy is None:
        return None
    return samplers.run([spy, "dump", *flags, "--pid", str(pid)], timeout=timeout,
                        env=dict(os.environ, RUST_BACKTRACE="0"))


def ptrace_denial(capabilities_hex: str | None = None, yama_scope: int | None = None) -> str | None:
    """Why py-spy may not read a process that is not our descendant, or None if it may.

    Reads /proc unless the readings are given (tests pass constructed ones).
    """
    if capabilities_hex is None:
        capabilities_hex = "0"
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("CapEff:"):
                    capabilities_hex = line.split()[1]
        except OSError:
            pass
    if yama_scope is None:
        try:
            yama_scope = int(YAMA_SCOPE_FILE.read_text().strip())
        except (OSError, ValueError):
            yama_scope = 0  # no Yama: classic ptrace rules (same user, or root)
    has_cap = bool(int(capabilities_hex, 16) >> CAP_SYS_PTRACE & 1)
    how = ("allow it with `sudo sysctl kernel.yama.ptrace_scope=0`, run fieldguide with CAP_SYS_PTRACE "
           "(e.g. `docker run --cap-add SYS_PTRACE`, or sudo), or use launch mode: fieldguide diagnose -- CMD")
    if yama_scope == 3:
        return "ptrace not permitted: kernel.yama.ptrace_scope is 3 (no attaching at all); use launch mode: fieldguide diagnose -- CMD"
    if yama_scope in (1, 2) and not has_cap:
        return f"ptrace not permitted: kernel.yama.ptrace_scope is {yama_scope} and fieldguide lacks CAP_SYS_PTRACE; {how}"
    return None


PTRACE_ERROR_MARKS = ("Permission denied", "Operation not permitted", "os error 1)", "os error 13)")


def classify_py_spy_failure(pid: int, stderr: str) -> BadInput:
    """A one-line error for a failed `py-spy dump`, from its stderr."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("Stack backtrace", "  "))]
    first = next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "py-spy failed")
    if any(mark in stderr for mark in PTRACE_ERROR_MARKS):
        return BadInput(f"ptrace not permitted for pid {pid} ({first}); run fieldguide with CAP_SYS_PTRACE or as the "
                        "same user, set kernel.yama.ptrace_scope=0, or use launch mode: fieldguide diagnose -- CMD")
    if "Failed to find python" in stderr or "python interpreter" in stderr.lower() or "executable name" in stderr:
        return BadInput(f"pid {pid} is not a Python process py-spy can read ({first})")
    return BadInput(f"cannot read pid {pid} with py-spy: {first}")


def is_python_name(*names: str) -> bool:
    """Whether any of these program names (a process name, an executable's basename) is Python."""
    return any(os.path.basename(n).startswith(("python", "pypy")) for n in names if n)


def looks_like_python(proc: psutil.Process) -> bool:
    try:
        names = [proc.name(), os.path.basename(proc.exe() or "")]
        cmdline = proc.cmdline()
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return True  # let py-spy decide
    if cmdline:
        names.append(cmdline[0])
    if is_python_name(*names):
        return True
    try:
        with open(f"/proc/{proc.pid}/maps") as maps:
            return any("libpython" in line for line in maps)
    except OSError:
        return False
