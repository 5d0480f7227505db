"""A command fieldguide starts with its agent loaded, and ends (with every process it started)
when the walk is over."""

from __future__ import annotations

import collections
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from fieldguide.agent import AGENT_PACKAGE_FILE
from fieldguide.agent.bootstrap import write_bootstrap
from fieldguide.agent.channel import AgentConnection, AgentServer
from fieldguide.agent.inside.capabilities.overrides import override_problems
from fieldguide.errors import BadInput, TargetFailed
from fieldguide.host.watchdog import (
    OWNER_ENV,
    Watchdog,
    claim,
    end_marked,
    new_token,
    sweep_leftovers,
)
from fieldguide.targets.base import Target
from fieldguide.targets.signals import ending_signals_held

LOG_LINES_KEPT = 400


@functools.lru_cache(maxsize=1)
def _sweep_once() -> None:
    """Directories an earlier fieldguide left when it was killed (its watchdog with it) go once a run."""
    sweep_leftovers()


MAX_LINE_BYTES = 4096  # of one line of the job's output kept for the report's log tail


class LaunchTarget(Target):
    """A command fieldguide starts with its agent loaded, and ends when the walk is over."""

    kind = "launch"
    _ended_by_us = False

    def __init__(self, cmd: list[str], *, echo: Any = None, env: dict[str, str] | None = None,
                 arm: tuple[str, ...] = (), extra_env: dict[str, str] | None = None):
        """`env`: the job's environment (default: ours); `extra_env`: what fieldguide adds for this
        walk (a trace directory), which a relaunch for an experiment leaves out."""
        if not cmd:
            raise BadInput("no command to launch after --")
        self.cmd = list(cmd)
        if shutil.which(cmd[0]) is None:
            raise TargetFailed(f"command not found: {cmd[0]}")
        overrides = {**(env if env is not None else os.environ), **(extra_env or {})}.get("FIELDGUIDE_OVERRIDES", "")
        if problems := override_problems(overrides):
            raise BadInput(f"FIELDGUIDE_OVERRIDES: {'; '.join(problems)}")
        _sweep_once()
        self._dir = Path(tempfile.mkdtemp(prefix="fieldguide-"))  # mode 0700: private to this user
        claim(self._dir)
        # Every process of the job carries it, one that left the job's session too (watchdog.py).
        self._token = new_token()
        self._watchdog: Watchdog | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        self._close_done = threading.Event()
        self._log: collections.deque[str] = collections.deque(maxlen=LOG_LINES_KEPT)
        self._echo = echo
        self._arm = arm
        self.base_env = dict(env if env is not None else os.environ)
        self.extra_env = dict(extra_env or {})
        self._paused = False
        try:
            self._start({**self.base_env, **self.extra_env})
        except BaseException:
            # A failed or interrupted set-up leaves nothing behind: no job, no socket, no thread, no directory.
            if getattr(self, "popen", None) is not None and self.popen.poll() is None:
                self._kill_session()
                self.popen.wait(timeout=5)
            end_marked(self._token)
            if self.agent is not None:
                self.agent.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            if self._watchdog is not None:
                self._watchdog.release()
            raise

    def _start(self, env: dict[str, str]) -> None:
        try:
            self.agent = AgentServer(self._dir)
        except OSError as err:  # e.g. a socket path over 108 bytes under a long $TMPDIR
            raise TargetFailed(f"cannot open the agent channel in {self._dir}: {err.strerror or err}") from None
        boot = self._dir / "boot"
        try:
            boot.mkdir()
            write_bootstrap(boot)
        except OSError as err:  # a full or read-only disk
            raise TargetFailed(f"cannot write the agent's bootstrap in {boot}: {err.strerror or err}") from None
        child_env = dict(env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(boot), child_env.get("PYTHONPATH", "")) if p)
        child_env["FIELDGUIDE_AGENT_SOCKET"] = str(self.agent.path)
        child_env["FIELDGUIDE_AGENT_FILE"] = str(AGENT_PACKAGE_FILE)
        child_env["FIELDGUIDE_AGENT_TOKEN"] = self.agent.token
        child_env["FIELDGUIDE_TRACER_PID"] = str(os.getpid())
        child_env[OWNER_ENV] = self._token
        if self._arm:
            child_env["FIELDGUIDE_AGENT_ARM"] = ",".join(self._arm)
        child_env.setdefault("PYTHONUNBUFFERED", "1")  # so its output reaches us as it happens
        try:
            self._watchdog = Watchdog(self._token, self._dir)
        except OSError as err:
            raise TargetFailed(f"cannot start fieldguide's watchdog: {err.strerror or err}") from None
        self.started = time.monotonic()
        # Ctrl-C, SIGTERM and SIGHUP wait until the job's Popen is ours: one that arrived between
        # the fork and the assignment would leave a job nobody ends.
        with ending_signals_held():
            try:
                # Its own session: a Ctrl-C meant for fieldguide does not hit the job; we end it ourselves.
                self.popen = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=child_env, start_new_session=True)
            except OSError as err:
                raise TargetFailed(f"cannot start {self.cmd[0]}: {err.strerror}") from None
            self._watchdog.guard(self.popen.pid)
        self._reader = threading.Thread(target=self._read_output, name="fieldguide-target-output", daemon=True)
        self._reader.start()

    def _read_output(self) -> None:
        """The job's output a line at a time, each kept to its first MAX_LINE_BYTES: a job that
        prints megabytes with no newline is read in pieces, its tail passed through, not kept (it
        once cost 37 CPU-seconds to keep and redact whole)."""
        assert self.popen.stdout is not None
        cut = False  # inside a line already cut: its pieces are passed over until its newline
        for raw in iter(lambda: self.popen.stdout.readline(MAX_LINE_BYTES), b""):  # type: ignore[union-attr]
            whole = raw.endswith(b"\n")
            if cut:
                cut = not whole
                continue
            line = raw.decode(errors="replace").rstrip("\n")
            if not whole and len(raw) >= MAX_LINE_BYTES:
                line, cut = line + " …", True
            if "Failed to initialize NumPy" in line:
                continue
            self._log.append(line)
            if self._echo is not None:
                self._echo(line)

    def wait_ready(self, timeout: float, min_steps: int = 3,
                   cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Wait until the agent reports training steps. False when the time ran out with none
        (the walk goes on and says so), when the walk was cancelled, or when the job ended first
        having left evidence (steps, an exception): the walk judges what it left. A job that ended
        leaving nothing fails (exit 3)."""
        assert self.agent is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not cancelled():
            conn = self.agent.primary()
            if conn is not None and conn.steps_total >= min_steps:
                return True
            # Forward after forward and no backward yet is no reason to stop waiting: an evaluation
            # before training (nanoGPT evaluates at iteration 0) looks the same as serving until
            # its first backward. The timeout decides, and the reason says what was seen.
            if self.popen.poll() is not None:
                self._reader.join(timeout=2)
                conn = self._settled_connection()
                if conn is not None and (conn.steps_total or conn.exception()):
                    return False
                raise TargetFailed(f"{self.cmd[0]} {self._exit_text()} before it could be measured",
                                   detail=self.log_tail(8))
            time.sleep(0.05)
        return False

    def _settled_connection(self) -> AgentConnection | None:
        """The primary connection once the ended job's last messages are in (its socket closed)."""
        assert self.agent is not None
        self.agent.wait_for(lambda: all(c.closed for c in self.agent._connections), timeout=2.0)
        return self.agent.primary()

    def _exit_text(self) -> str:
        code = self.popen.returncode
        if code is None:
            return "is running"
        if code < 0:
            try:
                text = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                text = f"was killed by signal {-code}"
        else:
            text = f"exited with status {code}"
        conn = self.agent.primary() if self.agent else None
        exc = conn.exception() if conn is not None else None
        if exc:
            text += f" ({exc['type']}: {exc['message']}" + (f" at {exc['where']}" if exc.get("where") else "") + ")"
        return text

    def not_ready_reason(self, timeout: float) -> str:
        conn = self.agent.primary() if self.agent else None
        if conn is None:
            return (f"the agent did not load within {timeout:.0f} s (not a Python command, or run with -I/-E, "
                    "which ignore PYTHONPATH); only outside probes could measure")
        if not conn.torch:
            return f"the job had not imported torch within {timeout:.0f} s"
        served = next((sig["forwards_before_training"] for sig in conn.stream("loop", "signals").items
                       if sig.get("forwards_before_training")), 0)
        if served and not conn.steps_total:
            return (f"{served} forward passes and no backward within {timeout:.0f} s: a model being served, or an "
                    "evaluation longer than that before training (a larger --budget waits longer)")
        return f"no training step (optimizer.step or backward()) within {timeout:.0f} s"

    @property
    def pid(self) -> int:
        conn = self.agent.primary() if self.agent else None
        return conn.pid if conn is not None and conn.pid else self.popen.pid

    def alive(self) -> bool:
        if self.popen.poll() is not None:
            return False
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def relaunch_env(self, change: dict[str, str]) -> dict[str, str]:
        """The environment to launch the same command again with one change (an A/B experiment)."""
        return {**self.base_env, **change}

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def pause(self) -> None:
        """Stop the job and its workers (SIGSTOP to its process group) while another arm is measured."""
        if self.popen.poll() is None and not self._paused:
            self._paused = True
            self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._signal_group(signal.SIGCONT)

    def capabilities(self) -> set[str]:
        caps = {"process", "launch", *super().capabilities()}
        conn = self.agent.primary() if self.agent else None
        if conn is not None:  # closed too: what an ended job's agent recorded can still be judged
            caps.add("agent")
        return caps

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "pid": self.pid, "cmdline": self.cmd,
                "exit_status": self.popen.returncode}

    def log_tail(self, lines: int = 40) -> list[str]:
        return list(self._log)[-lines:]

    def _reap(self) -> int | None:
        """The exit status once the job is gone (a process still tearing down gets a moment)."""
        if self.popen.poll() is None and not self.alive():
            try:
                self.popen.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        return self.popen.poll()

    def gone_reason(self) -> str:
        if self._reap() is None:
            return "the target exited mid-probe"
        conn = self.agent.primary() if self.agent else None
        steps = f" after {conn.steps_total} steps" if conn is not None else ""
        return f"the target {self._exit_text()}{steps}"

    def ending(self) -> dict[str, Any] | None:
        code = self._reap()
        if code is None or self._ended_by_us:
            return None
        self._settled_connection()
        conn = self.agent.primary() if self.agent else None
        signal_name = None
        if code < 0:
            try:
                signal_name = signal.Signals(-code).name
            except ValueError:
                signal_name = str(-code)
        return {"code": code if code >= 0 else None, "signal": signal_name,
                "exception": conn.exception() if conn is not None else None,
                "steps": conn.steps_total if conn is not None else 0, "text": f"the target {self._exit_text()}"}

    def close(self) -> None:
        """SIGINT (Python's KeyboardInterrupt: the job's own cleanup runs), then SIGTERM, then SIGKILL.

        Idempotent: a second call waits for the first to finish. A second Ctrl-C while it runs
        does not cut the escalation short."""
        with self._close_lock:
            first = not self._closed
            self._closed = True
            self._ended_by_us = self.popen.poll() is None
        if not first:
            self._close_done.wait(timeout=20)
            return
        # Ctrl-C, SIGTERM and SIGHUP wait until the job is ended: delivered after, not halfway.
        with ending_signals_held():
            try:
                self._end_job()
            finally:
                self._close_done.set()

    def _kill_session(self) -> None:
        """SIGKILL to the job's session (its own process group, from start_new_session)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _end_job(self) -> None:
        self.resume()  # a paused job cannot handle the signals that end it cleanly
        if self.popen.poll() is None:
            for sig, wait in ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.popen.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.popen.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._kill_session()  # workers or grandchildren left in the job's session go with it
        end_marked(self._token)  # and those that left it (setsid, a daemon's double fork)
        self._reader.join(timeout=2)
        if self.agent is not None:
            self.agent.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        if self._watchdog is not None:
            self._watchdog.release()
