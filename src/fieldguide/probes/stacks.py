"""Stacks from outside, with py-spy: where the main thread and the DataLoader workers are.

Two `py-spy record` samplers run side by side over the same window: one with
`--idle` (every sample, so waiting is visible) and one without (on-CPU samples
only). py-spy's record formats drop the idle flag, so the pair is what tells a
category's CPU share: active count / all count. `--subprocesses` covers the
workers (`dump --json -s` would silently ignore them). `--nonblocking` so the
target is never paused; 2 x 20 Hz (see benchmarks/overhead.py for what it costs).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext
from fieldguide.probes.stackclass import (
    ANOMALY,
    BACKWARD,
    DATA_WAIT,
    FORWARD,
    IO,
    OPTIMIZER,
    OTHER,
    PRODUCE,
    PROFILER,
    STARTUP,
    ThreadSample,
    summarize,
)

_PROCESS = re.compile(r'process (\d+):"')
_THREAD = re.compile(r"thread \((\w+)\)(?:: (.*))?$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::(\d+))?\)$")
MIN_PRODUCE_SAMPLES = 5


def parse_raw(text: str, main_pid: int) -> list[ThreadSample]:
    """py-spy `record -f raw -s -t` lines: `process P:"cmd";[process C:"cmd";]thread (T): name;f1;f2 COUNT`."""
    samples = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or " " not in line:
            continue
        body, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        pid = main_pid
        while True:
            m = _PROCESS.match(body)
            if not m:
                break
            pid = int(m.group(1))
            end = body.find('";', m.end())
            if end < 0:
                break
            body = body[end + 2:]
        thread = ""
        head, sep, rest = body.partition(";")
        m = _THREAD.match(head)
        if m:
            # py-spy omits the name when it cannot read it; the thread whose id is the pid is the main one.
            name = m.group(2) or ("MainThread" if m.group(1) == str(pid) else m.group(1))
            thread, body = name, rest if sep else ""
        frames = []
        for raw in body.split(";") if body else []:
            fm = _FRAME.match(raw)
            frames.append((fm.group(1), fm.group(2)) if fm else (raw, ""))
        samples.append(ThreadSample(pid=pid, role="main" if pid == main_pid else "worker", thread=thread,
                                    stack=frames, count=int(count_text)))
    return samples


def _short(stack: list[tuple[str, str]], keep: int = 5) -> str:
    frames = [f"{func} ({os.path.basename(file)})" if file else func for func, file in stack]
    return " ← ".join(reversed(frames[-keep:]))


def stack_values(all_samples: list[ThreadSample], active_samples: list[ThreadSample],
                 alive_at_end: set[int] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The named values and the evidence, from parsed samples of both samplers.

    `alive_at_end` holds the pids alive when sampling ended; a sampled worker not among
    them was replaced mid-window (workers restarted each epoch).
    """
    summary = summarize(all_samples, active_samples)
    total = summary.main_total
    values: dict[str, Any] = {"samples": total, "workers": len(summary.worker_pids)}
    share = summary.main_share
    values["data_wait_fraction"] = share(DATA_WAIT, PRODUCE)
    # Waiting on the worker life cycle: the main thread creating an iterator, or waiting for a
    # batch while workers start. When workers were replaced inside the window (each epoch
    # without persistent_workers), a wait while no worker was producing is a life-cycle wait
    # (spawning, worker_init_fn, not yet born); otherwise only samples of workers in their
    # start-up count. Steady starvation shows workers busy in __getitem__ while the main thread waits.
    main_startup = share(STARTUP)
    churn = alive_at_end is not None and bool(summary.worker_pids - alive_at_end)
    worker_idle_share = 1.0 - (summary.worker_share(PRODUCE) or 0.0) if churn else (summary.worker_share(STARTUP) or 0.0)
    lifecycle_wait = (share(DATA_WAIT) or 0.0) * worker_idle_share if summary.worker_total else 0.0
    values["startup_wait_fraction"] = None if main_startup is None else main_startup + lifecycle_wait
    values["workers_replaced"] = churn
    # Who produces the batches: the main process (num_workers=0) or the workers.
    in_workers = summary.worker_all.get(PRODUCE, 0)
    in_main = summary.main_all.get(PRODUCE, 0)
    if in_workers >= in_main and in_workers >= MIN_PRODUCE_SAMPLES:
        where, produce_all, produce_active = "workers", in_workers, summary.worker_active.get(PRODUCE, 0)
    elif in_main >= MIN_PRODUCE_SAMPLES:
        where, produce_all, produce_active = "main process", in_main, summary.main_active.get(PRODUCE, 0)
    else:
        where, produce_all, produce_active = None, 0, 0
    values["producer"] = where
    values["producer_cpu_fraction"] = min(produce_active / produce_all, 1.0) if produce_all else None
    values["worker_busy_fraction"] = summary.worker_share(PRODUCE)
    values["io_fraction"] = share(IO)
    idle_other = summary.main_all.get(OTHER, 0) - summary.main_active.get(OTHER, 0)
    values["blocked_other_fraction"] = max(idle_other, 0) / total if total else None
    values["anomaly_trace_fraction"] = share(ANOMALY)
    values["anomaly_trace_samples"] = summary.main_all.get(ANOMALY, 0)
    values["profiler_fraction"] = share(PROFILER)
    values["forward_fraction"] = share(FORWARD)
    values["backward_fraction"] = share(BACKWARD)
    values["optimizer_fraction"] = share(OPTIMIZER)
    main_stacks = sorted((s for s in all_samples if s.role == "main" and s.thread == "MainThread"),
                         key=lambda s: -s.count)
    worker_stacks = sorted((s for s in all_samples if s.role == "worker" and s.thread == "MainThread"),
                           key=lambda s: -s.count)
    evidence = {
        "main_categories": {c: {"samples": n, "on_cpu": summary.main_active.get(c, 0)}
                            for c, n in sorted(summary.main_all.items(), key=lambda kv: -kv[1])},
        "worker_categories": {c: {"samples": n, "on_cpu": summary.worker_active.get(c, 0)}
                              for c, n in sorted(summary.worker_all.items(), key=lambda kv: -kv[1])},
        "top_stacks": [{"share": round(s.count / total, 3) if total else 0, "category": s.category,
                        "stack": _short(s.stack)} for s in main_stacks[:6]],
        "top_worker_stacks": [{"samples": s.count, "category": s.category, "stack": _short(s.stack)}
                              for s in worker_stacks[:4]],
    }
    return values, evidence


def _descendants(pid: int) -> set[int]:
    import psutil

    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


@register
class StackSample(Probe):
    id = "stacks.sample"
    title = "Sample the main thread and DataLoader workers with py-spy (idle included)"
    needs = frozenset({NEEDS_PROCESS})
    params = {"seconds": 6.0, "rate": 20}
    values = {
        "samples": "", "workers": "", "data_wait_fraction": "fraction", "startup_wait_fraction": "fraction",
        "workers_replaced": "", "producer": "", "producer_cpu_fraction": "fraction", "worker_busy_fraction": "fraction",
        "io_fraction": "fraction", "blocked_other_fraction": "fraction", "anomaly_trace_fraction": "fraction",
        "anomaly_trace_samples": "",
        "profiler_fraction": "fraction", "forward_fraction": "fraction", "backward_fraction": "fraction",
        "optimizer_fraction": "fraction",
    }

    def run(self, ctx: ProbeContext, seconds: float = 6.0, rate: int = 20) -> Measurement:
        from fieldguide.targets import classify_py_spy_failure, py_spy_path

        spy = py_spy_path()
        if spy is None:
            return self.cannot("py-spy is not installed (pip install py-spy)")
        pid = ctx.target.pid
        if pid is None:
            return self.cannot("no target process")
        seconds = max(1.0, min(seconds, ctx.budget_left))
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fieldguide-spy-") as tmp:
            outputs = {kind: Path(tmp) / f"{kind}.txt" for kind in ("all", "active")}
            procs = {}
            for kind, out in outputs.items():
                cmd = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--duration", str(int(round(seconds))),
                       "--format", "raw", "--subprocesses", "--threads", "--nonblocking", "--output", str(out)]
                if kind == "all":
                    cmd.append("--idle")
                procs[kind] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                               env=dict(os.environ, RUST_BACKTRACE="0"))
            ctx.on_reading({"probe": self.id, "status": f"sampling pid {pid} at {rate} Hz for {seconds:.0f} s"})
            while any(p.poll() is None for p in procs.values()):
                if ctx.cancelled.is_set():
                    for p in procs.values():
                        p.send_signal(2)  # py-spy writes what it has on SIGINT
                    break
                ctx.on_reading({"probe": self.id, "elapsed": time.monotonic() - started, "of": seconds})
                time.sleep(0.2)
            errors = {}
            for kind, p in procs.items():
                try:
                    _, err = p.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    _, err = p.communicate()
                errors[kind] = err or ""
            texts = {kind: out.read_text() if out.exists() else "" for kind, out in outputs.items()}
        elapsed = time.monotonic() - started
        alive_at_end = _descendants(pid)
        provenance = f"py-spy record --idle / on-CPU, {rate} Hz each, {seconds:.0f} s, --subprocesses --nonblocking"
        if not texts["all"].strip():
            if not ctx.target.alive():
                return self.cannot(ctx.target.gone_reason(), provenance=provenance, seconds=elapsed)
            failure = classify_py_spy_failure(pid, errors["all"])
            return self.cannot(str(failure), provenance=provenance, seconds=elapsed)
        all_samples = parse_raw(texts["all"], pid)
        active_samples = parse_raw(texts["active"], pid)
        if procs["active"].returncode not in (0, None) and not texts["active"].strip():
            return self.cannot("py-spy's on-CPU sampler failed: " + (errors["active"].strip().splitlines() or ["?"])[-1],
                               provenance=provenance, seconds=elapsed)
        values, evidence = stack_values(all_samples, active_samples, alive_at_end=alive_at_end)
        if not values["samples"]:
            return self.cannot("py-spy saw no samples of the main thread", provenance=provenance, seconds=elapsed)
        return self.measurement(values=values, evidence=evidence, provenance=provenance, seconds=elapsed)
