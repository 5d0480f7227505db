"""A running process, read from outside: fieldguide never stops, signals or kills it."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import psutil

from fieldguide.errors import BadInput
from fieldguide.host.access import (
    PTRACE_ERROR_MARKS,
    classify_py_spy_failure,
    looks_like_python,
    ptrace_denial,
    py_spy_dump,
    py_spy_path,
)
from fieldguide.targets.base import Target


class AttachTarget(Target):
    """A running process. fieldguide reads it; it never stops, signals or kills it."""

    kind = "attach"

    def __init__(self, pid: int):
        self._pid = pid
        if pid <= 0:
            raise BadInput(f"--pid must be a positive process id, not {pid}")
        try:
            self.proc = psutil.Process(pid)
            uid = self.proc.uids().real
            self._cmdline = self.proc.cmdline()
            status = self.proc.status()
        except psutil.NoSuchProcess:
            raise BadInput(f"no process with pid {pid}") from None
        except psutil.AccessDenied:
            raise BadInput(f"pid {pid} cannot be read (access denied); run fieldguide as its user or as root") from None
        if status == psutil.STATUS_ZOMBIE:
            raise BadInput(f"pid {pid} has exited (zombie)")
        if uid != os.getuid() and os.geteuid() != 0:
            try:
                import pwd

                owner = pwd.getpwuid(uid).pw_name
            except (KeyError, ImportError):
                owner = str(uid)
            raise BadInput(f"pid {pid} belongs to another user ({owner}); attach to your own processes, or run as root")
        try:
            if not looks_like_python(self.proc):
                raise BadInput(f"pid {pid} is not a Python process ({self.proc.name()})")
        except psutil.NoSuchProcess:
            raise BadInput(f"pid {pid} exited while fieldguide was checking it") from None
        self.launcher_pid: int | None = None
        self._walk_a_rank()
        denial = ptrace_denial()
        if denial:
            raise BadInput(denial)
        self._check_readable()

    def _walk_a_rank(self) -> None:
        """A launcher (torchrun, srun's step) does not train: its ranks do. The walk measures its
        lowest rank, and the dist nodes compare every rank."""
        from fieldguide.host.rankfinder import sibling_ranks

        try:
            if "RANK" in self.proc.environ():
                return
        except psutil.Error:
            return
        ranks = sibling_ranks(self._pid)
        if ranks:
            self.launcher_pid = self._pid
            self._pid = ranks[0]["pid"]
            self.proc = psutil.Process(self._pid)
            self._cmdline = self.proc.cmdline()

    def _check_readable(self) -> None:
        if py_spy_path() is None:
            return  # the stack probe will say py-spy is missing; psutil probes still work
        failure = ""
        # A non-blocking dump can catch the interpreter mid-change ("Failed to get stack
        # traces"; a quarter of dumps on a loop under detect_anomaly, and they come in runs):
        # after three, one blocking dump (a pause of milliseconds, once) settles whether the
        # process can be read.
        for flags in (["--nonblocking"], ["--nonblocking"], ["--nonblocking"], []):
            try:
                done = py_spy_dump(self._pid, *flags, timeout=15)
            except subprocess.TimeoutExpired:
                return
            if done is None or done.returncode == 0 or not self.alive():
                return
            failure = done.stderr + done.stdout
            if any(mark in failure for mark in PTRACE_ERROR_MARKS):
                break
            time.sleep(0.2)
        raise classify_py_spy_failure(self._pid, failure)

    @property
    def pid(self) -> int:
        return self._pid

    def alive(self) -> bool:
        try:
            return self.proc.is_running() and self.proc.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def capabilities(self) -> set[str]:
        return {"process", *super().capabilities()}

    def describe(self) -> dict[str, Any]:
        described = {"kind": self.kind, "pid": self._pid, "cmdline": self._cmdline}
        if self.launcher_pid is not None:
            described["launcher_pid"] = self.launcher_pid
        return described

    def gone_reason(self) -> str:
        # Said by walks and watches alike: a watch between walks is not "mid-walk".
        return f"the target (pid {self._pid}) exited"

    def ending(self) -> dict[str, Any] | None:
        if self.alive():
            return None
        # Only a parent can read a process's exit status; fieldguide attached, it is not one.
        return {"code": None, "signal": None, "exception": None,
                "text": f"pid {self._pid} exited during the walk (its exit status is visible only to its parent)"}
