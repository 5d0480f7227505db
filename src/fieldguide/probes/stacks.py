"""Stacks from outside, with py-spy: where the main thread and the DataLoader workers are.

Two `py-spy record` samplers run side by side over the same window: one with
`--idle` (every sample, so waiting is visible) and one without (on-CPU samples
only). py-spy's record formats drop the idle flag, so the pair is what tells a
category's CPU share: active count / all count. `--subprocesses` covers the
workers (`dump --json -s` would silently ignore them). `--nonblocking` so the
target is never paused; 2 x 20 Hz (see benchmarks/overhead.py for what it costs).
`--full-filenames` so that the source of a blocked line can be read: a thread in a
C call (sleep, fsync, a lock) shows only its caller's line (see stack_categories.py).
"""

from __future__ import annotations

import ast
import collections
import os
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext
from fieldguide.probes.loop_dataflow import LoopFlow, is_update_function
from fieldguide.probes.pyspy_raw import FRAME as _FRAME
from fieldguide.probes.pyspy_raw import PROCESS as _PROCESS
from fieldguide.probes.pyspy_raw import THREAD as _THREAD
from fieldguide.probes.stack_categories import (
    ANOMALY,
    BACKWARD,
    COLLECTIVE,
    DATA_WAIT,
    DEVICE_SYNC,
    FORWARD,
    IO,
    LOCK_WAIT,
    OPTIMIZER,
    OTHER,
    PRODUCE,
    PROFILER,
    SLEEP,
    STARTUP,
    Frame,
    ThreadSample,
    compile_state,
    in_torch,
    is_agent_file,
    is_io_file,
    is_stdlib,
    summarize,
    uses_gpu,
)
from fieldguide.probes.stack_recording import PooledTexts, record_stacks
from fieldguide.probes.step_budget import (
    BudgetLine,
    flow_of,
    outer_loops,
    sample_budget,
    sample_part,
    update_call_lines,
)
from fieldguide.probes.step_cycle import input_call, input_samples, loop_frame
from fieldguide.probes.uncertainty import share_margin

_PACKAGE = re.compile(r"(?:site|dist)-packages/([^/]+)")

# Not a judgement about the job (those live in the playbook): the fewest samples inside
# dataset/fetch/collate code from which the window can say *who* produces batches at all.
# Below it, `producer` and `producer_cpu_fraction` are None ("cannot tell"), never a guess.
# 5 samples at the default 20 Hz is a quarter of a second of producing seen in the window.
MIN_PRODUCE_SAMPLES = 5
# How long py-spy gets to write its file after SIGINT before it is killed.


def parse_raw(text: str, main_pid: int) -> list[ThreadSample]:
    """py-spy `record -f raw -s -t` lines: `process P:"cmd";[process C:"cmd";]thread (T): name;f1;f2 COUNT`.

    Each line names its process chain from the recorded root down. `main_pid` and the processes
    under it are kept (a recording of a launcher holds every rank: one rank's workers are its
    own children, not its sibling ranks nor the launcher)."""
    samples = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or " " not in line:
            continue
        body, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        chain: list[int] = []
        while True:
            m = _PROCESS.match(body)
            if not m:
                break
            chain.append(int(m.group(1)))
            end = body.find('";', m.end())
            if end < 0:
                break
            body = body[end + 2:]
        if chain and main_pid not in chain:
            continue  # a process beside main_pid, or above it
        pid = chain[-1] if chain else main_pid
        thread = ""
        head, sep, rest = body.partition(";")
        m = _THREAD.match(head)
        if m:
            # py-spy omits the name when it cannot read it; the thread whose id is the pid is the main one.
            name = m.group(2) or ("MainThread" if m.group(1) == str(pid) else m.group(1))
            thread, body = name, rest if sep else ""
        frames = []
        lines: list[int | None] = []
        leaf_line = None
        for raw in body.split(";") if body else []:
            fm = _FRAME.match(raw)
            if fm and is_agent_file(fm.group(2)):
                leaf_line = None  # the caller's line under an agent wrapper is not known
                continue
            frames.append((fm.group(1), fm.group(2)) if fm else (raw, ""))
            leaf_line = int(fm.group(3)) if fm and fm.group(3) else None
            lines.append(leaf_line)
        samples.append(ThreadSample(pid=pid, role="main" if pid == main_pid else "worker", thread=thread,
                                    stack=frames, count=int(count_text), leaf_line=leaf_line, lines=lines))
    return samples


# Source files parsed in this process, by file identity: the stack window and every rank of the
# rank comparison read the same torch files, and parsing a large one costs tens of milliseconds.
_PARSED: dict[tuple[int, int, int, int], tuple[list[str], list[tuple[int, int]]]] = {}
_PARSED_MAX = 512


class SourceReader:
    """The statement at a line of the target's source files, each file read and parsed once.

    Files are read through /proc/PID/root (the target's own mount namespace) and relative
    names through /proc/PID/cwd, falling back to the path as seen from here.
    """

    MAX_BYTES = 4 * 2**20

    def __init__(self, pid: int):
        self.pid = pid
        self._files: dict[str, tuple[list[str], list[tuple[int, int]]] | None] = {}

    def _candidates(self, file: str) -> list[str]:
        if os.path.isabs(file):
            return [f"/proc/{self.pid}/root{file}", file]
        return [f"/proc/{self.pid}/cwd/{file}"]

    def _load(self, file: str) -> tuple[list[str], list[tuple[int, int]]] | None:
        if file in self._files:
            return self._files[file]
        loaded = None
        for candidate in self._candidates(file):
            try:
                st = os.stat(candidate)
                if st.st_size > self.MAX_BYTES:
                    break
                key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
                loaded = _PARSED.get(key)
                if loaded is None:
                    if len(_PARSED) >= _PARSED_MAX:
                        _PARSED.clear()
                    text = Path(candidate).read_text(encoding="utf-8", errors="replace")
                    # By "\n" alone, as the interpreter counts lines (splitlines also breaks at a
                    # form feed, which shifts every later line against py-spy's line numbers).
                    loaded = _PARSED[key] = (text.split("\n"), statement_spans(text))
            except OSError:
                continue
            break
        self._files[file] = loaded
        return loaded

    def text(self, file: str) -> str | None:
        """The whole source of a file of the target's, or None when it cannot be read."""
        loaded = self._load(file) if file else None
        return "\n".join(loaded[0]) if loaded is not None else None

    def statement(self, file: str, line: int) -> str:
        """The source of the innermost statement at `line` (a compound statement's header only)."""
        loaded = self._load(file) if file else None
        if loaded is None or line < 1:
            return ""
        lines, spans = loaded
        inside = [(end - start, start, end) for start, end in spans if start <= line <= end]
        start, end = (min(inside)[1:] if inside else (line, line))
        return "\n".join(lines[start - 1:end])

    def fill(self, samples: Iterable[ThreadSample]) -> None:
        """Set `leaf_source` on the main process's main-thread samples. Not inside torch: the
        classifier reads the calls on the job's lines and the standard library's, never on torch's
        (whose large files cost tens of milliseconds each to parse)."""
        from fieldguide.probes.stack_categories import in_torch

        for s in samples:
            if s.role == "main" and s.thread == "MainThread" and s.stack and s.leaf_line \
                    and not in_torch(s.stack[-1][1]):
                s.leaf_source = self.statement(s.stack[-1][1], s.leaf_line)


def statement_spans(text: str) -> list[tuple[int, int]]:
    """(first line, last line) of every statement; a compound statement spans its header only."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        end = node.end_lineno or node.lineno
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.AST):
            end = max(node.lineno, getattr(body[0], "lineno", node.lineno) - 1)
        spans.append((node.lineno, end))
    return spans


def _innermost_caller(stack: list[Frame], skip_io: bool, leaf_line: int | None = None) -> tuple[str, bool] | None:
    """The innermost frame outside torch and the standard library (and the I/O packages, with
    `skip_io`), named as a person reads it, and whether it is an installed package's:
    ("Trainer._save_checkpoint (transformers)", True) or ("save (train.py:88)", False), the line
    only when that frame is the blocked one."""
    for depth, (func, file) in enumerate(reversed(stack)):
        if in_torch(file) or is_stdlib(file) or (skip_io and is_io_file(file)):
            continue
        package = _PACKAGE.search(file)
        if package:
            return f"{func} ({package.group(1)})", True
        line = f":{leaf_line}" if depth == 0 and leaf_line else ""
        return f"{func} ({os.path.basename(file)}{line})", False
    return None


def io_caller(stack: list[Frame], leaf_line: int | None = None) -> str | None:
    """The code that made the I/O call: the innermost frame outside torch, the standard library
    and the I/O packages (safetensors, requests...). The job's own function ("save_checkpoint
    (train.py)", with the line when it is the blocked frame) or a framework's
    ("Trainer._save_optimizer_and_scheduler (transformers)")."""
    found = _innermost_caller(stack, skip_io=True, leaf_line=leaf_line)
    return found[0] if found else None


def io_site(samples: list[ThreadSample], loop: Frame | None = None, flow: LoopFlow | None = None) -> str | None:
    """Where the job's own code does its I/O: the innermost frame of its code in the main
    thread's I/O samples, the most common ("save_checkpoint (train.py)", or with the line when
    that frame is the blocked one: "log_metrics (train.py:88)"). Not the reads of the `loop`'s
    call for its next batch: those are input."""
    sites: dict[str, int] = {}
    for s in samples:
        if s.role == "main" and s.thread == "MainThread" and s.category == IO \
                and not (loop is not None and input_call(s, loop, flow)):
            site = io_caller(s.stack, s.leaf_line)
            if site:
                sites[site] = sites.get(site, 0) + s.count
    return max(sites, key=lambda k: sites[k]) if sites else None


def framework_frame(stack: list[Frame]) -> str | None:
    """The innermost frame of an installed package other than torch (a trainer's loop, a logger,
    a progress bar), torch's and the standard library's skipped: "format_meter (tqdm)". None when
    the innermost such frame is the job's own code (its own Python, not a framework's)."""
    found = _innermost_caller(stack, skip_io=False)
    return found[0] if found and found[1] else None


def bookkeeping(all_samples: list[ThreadSample], loop: Frame | None,
                flow: LoopFlow | None = None) -> tuple[int, str | None]:
    """Samples of the training thread in a framework's own code (not the model, the update, the
    input, I/O or a wait): a trainer's per-step bookkeeping. With the frames that cost most,
    "format_meter (tqdm) 31%, _ResultCollection.log (lightning) 22%" (shares of those samples)."""
    frames: collections.Counter[str] = collections.Counter()
    for s in all_samples:
        if s.role != "main" or s.thread != "MainThread" or s.category != OTHER:
            continue
        if loop is not None and input_call(s, loop, flow):
            continue
        frame = framework_frame(s.stack)
        if frame:
            frames[frame] += s.count
    total = sum(frames.values())
    top = ", ".join(f"{f} {n / total:.0%}" for f, n in frames.most_common(3)) if total else None
    return total, top


def _short(stack: list[tuple[str, str]], keep: int = 5) -> str:
    frames = [f"{func} ({os.path.basename(file)})" if file else func for func, file in stack]
    return " ← ".join(reversed(frames[-keep:]))


# Shares of the training thread's samples: each sample is in the phase or not.
MAIN_THREAD_SHARES = (
    "data_wait_fraction", "io_fraction", "bookkeeping_fraction", "overhead_fraction", "torch_save_fraction",
    "sleep_fraction", "lock_wait_fraction", "collective_fraction", "device_sync_fraction",
    "blocked_other_fraction", "anomaly_trace_fraction", "profiler_fraction", "forward_fraction",
    "backward_fraction", "optimizer_fraction", "compiling_fraction", "compiled_code_fraction",
    "loop_work_fraction", "gc_fraction",
)


def sample_margins(values: dict[str, Any]) -> dict[str, float]:
    """Each share's uncertainty from the number of samples it is a share of."""
    samples = values.get("samples") or 0
    return {name: round(share_margin(values[name], samples), 4) for name in MAIN_THREAD_SHARES
            if isinstance(values.get(name), (int, float)) and samples}


def step_budget(main_all: list[ThreadSample], main_active: list[ThreadSample], loop: Frame | None,
                flow: LoopFlow | None, reader: SourceReader | None) -> list[BudgetLine]:
    """The training thread's samples as a step budget (probes/step_budget.py)."""
    updates: dict[tuple[str, str], bool] = {}  # each function read once, whatever its lines

    def is_update(file: str, func: str, line: int) -> bool:
        if (file, func) not in updates:
            text = reader.text(file) if reader is not None else None
            updates[(file, func)] = text is not None and is_update_function(text, func, line)
        return updates[(file, func)]

    def fetches(sample: ThreadSample) -> bool:
        return loop is not None and input_call(sample, loop, flow) is not None

    outer = outer_loops(main_all, loop, reader.text) if reader is not None else []
    update_lines = update_call_lines(main_all, loop, is_update) if loop is not None else set()
    return sample_budget(main_all, main_active,
                         lambda s: sample_part(s, loop, flow, fetches, framework_frame, is_update, outer, update_lines))


def stack_values(all_samples: list[ThreadSample], active_samples: list[ThreadSample],
                 alive_at_end: set[int] | None = None, device: bool = True,
                 reader: SourceReader | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The named values and the evidence, from parsed samples of both samplers.

    `alive_at_end` holds the pids alive when sampling ended; a sampled worker not among
    them was replaced mid-window (workers restarted each epoch). `reader` reads the job's source
    (the loop's, to tell what feeds the step from work beside it); by the main process's pid if None.
    """
    summary = summarize(all_samples, active_samples, device)
    main_all = [x for x in all_samples if x.role == "main" and x.thread == "MainThread"]
    main_active = [x for x in active_samples if x.role == "main" and x.thread == "MainThread"]
    if reader is None and main_all:
        reader = SourceReader(main_all[0].pid)
    step_loop = loop_frame(main_all)
    flow = flow_of(main_all, step_loop, reader.text) if reader is not None else None
    total = summary.main_total
    values: dict[str, Any] = {"samples": total, "workers_sampled": len(summary.worker_pids)}
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
    io_reads, loop = 0, None  # I/O samples that are the loop reading its next batch: input, not the loop's I/O
    values["input_from"] = "DataLoader.__next__" if summary.main_all.get(DATA_WAIT, 0) + in_main else None
    if not (summary.main_all.get(DATA_WAIT, 0) + in_main + in_workers):
        # No DataLoader: the loop's own calls for its next batch (a generator, get_batch, a queue).
        fetched = input_samples(main_all, main_active, flow)
        if fetched is not None and fetched.samples:
            values["data_wait_fraction"] = fetched.waiting_or_working / fetched.samples
            values["input_from"] = f"{fetched.call}, in the loop" if fetched.call else "no call for a batch in the loop"
            io_reads, loop = fetched.io_reads, fetched.loop
            if fetched.waiting_or_working >= MIN_PRODUCE_SAMPLES:
                where, produce_all, produce_active = "the training thread", fetched.waiting_or_working, fetched.on_cpu
    values["producer"] = where
    values["producer_cpu_fraction"] = min(produce_active / produce_all, 1.0) if produce_all else None
    values["worker_producing_fraction"] = summary.worker_share(PRODUCE)
    framework_samples, values["bookkeeping_at"] = bookkeeping(all_samples, loop, flow)
    values["bookkeeping_fraction"] = framework_samples / total if total else None
    # What host.overhead departs on from outside, where ops cannot be profiled: the framework's share.
    values["overhead_fraction"] = values["bookkeeping_fraction"]
    values["overhead_detail"] = (f"the training thread in a framework's own code in {values['bookkeeping_fraction']:.0%} "
                                 f"of its samples, most in {values['bookkeeping_at']}; ops are not profiled from "
                                 "outside" if framework_samples else None)
    values["io_fraction"] = max(summary.main_all.get(IO, 0) - io_reads, 0) / total if total else None
    values["io_at"] = io_site(all_samples, loop, flow)
    # Inside torch.save, which the agent times exactly in a launched job: what the samples need not estimate.
    saving = sum(x.count for x in all_samples if x.role == "main" and x.thread == "MainThread"
                 and any("torch/serialization.py" in f for _, f in x.stack))
    values["torch_save_fraction"] = saving / total if total else None
    values["sleep_fraction"] = share(SLEEP)
    values["lock_wait_fraction"] = share(LOCK_WAIT)
    values["collective_fraction"] = share(COLLECTIVE)
    values["device_sync_fraction"] = share(DEVICE_SYNC)
    # Off the CPU in no known category: blocked, but on what the stacks cannot say.
    idle_other = summary.main_all.get(OTHER, 0) - summary.main_active.get(OTHER, 0)
    values["blocked_other_fraction"] = min(max(idle_other, 0) / total, 1.0) if total else None
    values["anomaly_trace_fraction"] = share(ANOMALY)
    values["anomaly_trace_samples"] = summary.main_all.get(ANOMALY, 0)
    values["profiler_fraction"] = share(PROFILER)
    values["forward_fraction"] = share(FORWARD)
    values["backward_fraction"] = share(BACKWARD)
    values["optimizer_fraction"] = share(OPTIMIZER)
    main = [x for x in all_samples if x.role == "main" and x.thread == "MainThread"]
    states = [(compile_state(x.stack), x.count) for x in main]
    values["compiling_fraction"] = sum(n for st, n in states if st == "compiling") / total if total else None
    values["compiled_code_fraction"] = sum(n for st, n in states if st == "compiled") / total if total else None
    main_stacks = sorted((s for s in all_samples if s.role == "main" and s.thread == "MainThread"),
                         key=lambda s: -s.count)
    worker_stacks = sorted((s for s in all_samples if s.role == "worker" and s.thread == "MainThread"),
                           key=lambda s: -s.count)
    lines = step_budget(main_all, main_active, step_loop, flow, reader)
    own = [line for line in lines if line.part in ("loop_work", "gc")]
    values["loop_work_fraction"] = sum((line.share for line in own), 0.0) if total else None
    values["loop_work_at"] = next((line.at for line in own if line.at), None)
    values["gc_fraction"] = sum((line.share for line in lines if line.part == "gc"), 0.0) if total else None
    evidence = {
        "budget": [line.to_json() for line in lines],
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


def read_samples(texts: dict[str, str], pid: int) -> tuple[list[ThreadSample], list[ThreadSample]]:
    """Both samplers' samples (`record_stacks`' texts) with `pid` as the main process, each leaf's
    source statement read for the classifier."""
    samples = parse_raw(texts["all"], pid), parse_raw(texts["active"], pid)
    reader = SourceReader(pid)
    for found in samples:
        reader.fill(found)
    return samples


@register
class StackSample(Probe):
    id = "stacks.sample"
    evidence_kinds = (*ev.STACK_KINDS,)
    title = "Sample the main thread and DataLoader workers with py-spy (idle included)"
    needs = frozenset({NEEDS_PROCESS})
    # 75 samples of each kind in 2.5 s; a reading too close to its threshold is extended, window by
    # window, pooled with it (up to 300 samples in 10 s), so a reading far from its threshold ends
    # sooner and a near one gets more samples than a fixed window gave. Not faster (at 48 Hz the
    # samplers' CPU showed in a main-process loader's wait on the 2-core box): docs/results.md.
    params = {"seconds": 2.5, "rate": 30}
    pools = True
    values = {
        "samples": "", "workers_sampled": "", "data_wait_fraction": "fraction", "torch_save_fraction": "fraction",
        "io_at": "",
        "startup_wait_fraction": "fraction", "workers_replaced": "", "producer": "", "input_from": "",
        "producer_cpu_fraction": "fraction", "worker_producing_fraction": "fraction",
        "io_fraction": "fraction", "bookkeeping_fraction": "fraction", "bookkeeping_at": "",
        "overhead_fraction": "fraction", "overhead_detail": "",
        "sleep_fraction": "fraction", "lock_wait_fraction": "fraction",
        "collective_fraction": "fraction", "device_sync_fraction": "fraction",
        "blocked_other_fraction": "fraction", "anomaly_trace_fraction": "fraction",
        "anomaly_trace_samples": "",
        "profiler_fraction": "fraction", "forward_fraction": "fraction", "backward_fraction": "fraction",
        "optimizer_fraction": "fraction", "compiling_fraction": "fraction", "compiled_code_fraction": "fraction",
        "loop_work_fraction": "fraction", "loop_work_at": "", "gc_fraction": "fraction",
    }

    def run(self, ctx: ProbeContext, seconds: float = 2.5, rate: int = 30, pooled: int = 0) -> Measurement:
        from fieldguide.host.access import classify_py_spy_failure, py_spy_path

        earlier = ctx.pool_with.pool if pooled and ctx.pool_with is not None else None
        if pooled and not isinstance(earlier, PooledTexts):
            earlier, seconds = None, seconds * (pooled + 1)  # nothing to add to: one window as long

        spy = py_spy_path()
        if spy is None:
            return self.cannot("py-spy is not installed (pip install py-spy)")
        pid = ctx.target.pid
        if pid is None:
            return self.cannot("no target process")
        seconds = max(1.0, min(seconds, ctx.budget_left))
        started = time.monotonic()
        self.reading(ctx, elapsed=0.0, of=seconds,
                     status=f"sampling pid {pid} and its workers with py-spy at {rate} Hz")
        texts, errors, codes = record_stacks(spy, pid, seconds, rate, ctx.cancelled.wait,
                                             lambda: self.reading(ctx, elapsed=time.monotonic() - started, of=seconds))
        elapsed = time.monotonic() - started
        self.reading(ctx, elapsed=elapsed, of=seconds, status="reading the samples")
        alive_at_end = _descendants(pid)
        provenance = (f"py-spy record --idle / on-CPU, {rate} Hz each, {seconds:.0f} s, "
                      "--subprocesses --nonblocking")
        pool = PooledTexts(texts, seconds)
        if earlier is not None and texts["all"].strip():
            pool = earlier.add(texts, seconds)
            texts = pool.texts
            provenance += f"; {pooled + 1} windows pooled, {pool.seconds:.0f} s of samples in all"
        if not texts["all"].strip():
            if not ctx.target.alive():
                return self.cannot(ctx.target.gone_reason(), provenance=provenance, seconds=elapsed)
            failure = classify_py_spy_failure(pid, errors["all"])
            return self.cannot(str(failure), provenance=provenance, seconds=elapsed)
        if codes["active"] not in (0, None) and not texts["active"].strip():
            return self.cannot("py-spy's on-CPU sampler failed: "
                               + (errors["active"].strip().splitlines() or ["?"])[-1],
                               provenance=provenance, seconds=elapsed)
        all_samples, active_samples = read_samples(texts, pid)
        values, evidence = stack_values(all_samples, active_samples, alive_at_end=alive_at_end, device=uses_gpu(pid))
        if ctx.artifacts is not None:  # the window itself, for speedscope: what the counts were made from
            from fieldguide.probes.speedscope import keep_speedscope

            kept = keep_speedscope(ctx.artifacts(), texts["all"], f"py-spy, pid {pid}, {pool.seconds:.0f} s at {rate} Hz "
                                   "(idle included)", f"stacks-{pid}-{int(time.time())}", rate)
            if kept is not None:
                evidence["artifacts"] = [kept]
        if not values["samples"]:
            return self.cannot("py-spy saw no samples of the main thread", provenance=provenance, seconds=elapsed)
        measurement = self.measurement(values=values, evidence=evidence, provenance=provenance, seconds=elapsed,
                                       margins=sample_margins(values))
        measurement.pool = pool
        return measurement
