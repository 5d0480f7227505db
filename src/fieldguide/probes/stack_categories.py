"""Classify sampled Python stacks by what the thread was doing. Pure functions.

A stack is a list of (function, file) pairs, root first, as py-spy's raw
output gives them. The categories are the questions the slow-training
playbook asks: is the loop waiting for its next batch, who produces batches
and is that CPU work, is there file/network I/O or serialization in the step.

A thread blocked in a C call (`time.sleep`, `os.fsync`, `Lock.acquire`, `Tensor.item`)
shows no frame for that call: py-spy's innermost frame is the caller's line. So the
innermost frame of the user's own code is classified by the source of that line
(`leaf_source`, read by the probe), and a blocked thread in no known category stays
OTHER: it is never called file or network I/O without evidence.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field

Frame = tuple[str, str]  # (function, short file name)

# Where a training process's main thread can be.
DATA_WAIT = "data_wait"  # in DataLoader __next__, waiting for a batch from workers
PRODUCE = "produce"  # producing a batch: dataset __getitem__, fetch, collate
STARTUP = "startup"  # creating a DataLoader iterator: spawning workers, worker_init_fn
IO = "io"  # serialization or file/network I/O: torch.save, pickle, json, sockets
ANOMALY = "anomaly_trace"  # autograd anomaly mode recording a traceback for every op
PROFILER = "profiler"  # the autograd profiler's Python side
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
SLEEP = "sleep"  # time.sleep in the loop (a rate limiter, a retry back-off, a leftover debug pause)
LOCK_WAIT = "lock_wait"  # waiting on a lock, event, condition, queue or another thread/process
COLLECTIVE = "collective"  # torch.distributed: collectives, barriers, rendezvous
DEVICE_SYNC = "device_sync"  # the host waits for the device: synchronize, .item(), .cpu(), .tolist()
OTHER = "other"
# Worker processes.
WORKER_IDLE = "worker_idle"  # waiting for the next index from the main process


_DATALOADER = "torch/utils/data/dataloader.py"
_FETCH = "torch/utils/data/_utils/fetch.py"
_WORKER = "torch/utils/data/_utils/worker.py"
_COLLATE = "torch/utils/data/_utils/collate.py"
_STARTUP_FUNCS = {"DataLoader.__iter__", "DataLoader._get_iterator", "_MultiProcessingDataLoaderIter.__init__",
                  "_MultiProcessingDataLoaderIter._reset", "_SingleProcessDataLoaderIter.__init__",
                  "_BaseDataLoaderIter.__init__"}
_IO_FILES = ("torch/serialization.py", "pickle.py", "json/__init__.py", "json/encoder.py", "shutil.py",
             "socket.py", "ssl.py", "http/client.py", "urllib/request.py", "requests/", "urllib3/",
             "logging/__init__.py", "tempfile.py", "csv.py", "gzip.py", "zipfile", "_pyio.py",
             "safetensors/", "tensorboard/", "wandb/", "mlflow/", "boto3/", "botocore/", "fsspec/")
_ANOMALY_FILES = ("traceback.py", "linecache.py")
# Waits on other threads or processes (outside the DataLoader, whose frames are checked first).
_LOCK_FILES = ("threading.py", "queue.py", "multiprocessing/synchronize.py", "multiprocessing/queues.py",
               "multiprocessing/connection.py", "multiprocessing/pool.py", "concurrent/futures/")
_COLLECTIVE_FILES = ("torch/distributed/",)
# torch's own Python frames are classified by file (below); only other code is read by line,
# so that e.g. an optimizer's `.item()` on a CPU step counter is not called a device sync.
_TORCH = re.compile(r"(?:^|/)torch/")

# The C call on a blocked line, by the line's source (what the innermost frame is blocked in).
# The first that matches names the category; a line that matches none says nothing.
_CALLS = (
    (SLEEP, re.compile(r"(?<![\w.])(?:time\.)?sleep\(")),
    (LOCK_WAIT, re.compile(r"\.(?:acquire|wait)\(|\.join\(\s*(?:\)|timeout\b)|^\s*(?:async\s+)?with\s+[\w.]*lock\w*\s*[:,]",
                           re.IGNORECASE | re.MULTILINE)),
    (IO, re.compile(r"\bos\.(?:fsync|fdatasync|sync|write|read|pwrite|pread|replace|rename|remove|unlink|makedirs|"
                    r"sendfile)\(|(?<![\w.])open\(|\.(?:write|writelines|flush|read|readline|readlines|readinto|recv|"
                    r"recv_into|recvfrom|send|sendall|sendto|connect|accept|urlopen)\(|\bpickle\.(?:dump|dumps|load|loads)\(|"
                    r"\bshutil\.\w+\(")),
    (DEVICE_SYNC, re.compile(r"\.(?:item|cpu|tolist|numpy)\(\s*\)|\bsynchronize\(|\.to\(\s*['\"]cpu['\"]")),
)
_PROFILER_FILES = ("torch/autograd/profiler.py", "torch/profiler/", "torch/autograd/profiler_util.py")


# fieldguide's own agent inside a launched job (its wrappers on backward, torch.save and
# DataLoader.__next__, its hooks): never the job's frame, never shown as one.
AGENT_FILES = ("fieldguide/agent/inside/",)


def is_agent_file(file: str) -> bool:
    return any(a in file for a in AGENT_FILES)


def uses_gpu(pid: int) -> bool:
    """Whether a process has loaded the CUDA driver (libcuda in its memory map): only then can
    it wait for a device. True when the map cannot be read (the classifier then keeps its rule)."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return any("libcuda.so" in line for line in f)
    except OSError:
        return True


def _in(frame: Frame, *files: str) -> bool:
    return any(f in frame[1] for f in files)


# torch.compile at work (tracing, AOT autograd, inductor's code generation and C++ builds), and
# compiled code running (dynamo's frame wrapper, inductor's generated modules in its cache).
_COMPILING_FILES = ("torch/_dynamo/convert_frame.py", "torch/_dynamo/symbolic_convert.py",
                    "torch/_dynamo/output_graph.py", "torch/_inductor/compile_fx.py", "torch/_inductor/codecache.py",
                    "torch/_inductor/graph.py", "torch/_inductor/scheduler.py", "torch/_inductor/cpp_builder.py",
                    "torch/_inductor/async_compile.py", "torch/_functorch/aot_autograd.py",
                    "torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py",
                    "torch/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py")
_COMPILED_RUN_FILES = ("torch/_dynamo/eval_frame.py", "/torchinductor_")


def compile_state(stack: list[Frame]) -> str | None:
    """"compiling", "compiled" (running compiled code) or None (no torch.compile in this stack)."""
    if any(_in(frame, *_COMPILING_FILES) for frame in stack):
        return "compiling"
    if any(_in(frame, *_COMPILED_RUN_FILES) or frame[0].startswith("torch_dynamo_resume_in_") for frame in stack):
        return "compiled"
    return None


def is_loader_frame(frame: Frame) -> bool:
    return _in(frame, _DATALOADER, _FETCH, _COLLATE, _WORKER)


def _producing(stack: list[Frame], start: int) -> bool:
    """Below position `start`, is the thread fetching samples or collating them?"""
    for func, file in stack[start:]:
        if _FETCH in file or _COLLATE in file or func.endswith(("__getitem__", "__getitems__")):
            return True
    return False


def in_torch(file: str) -> bool:
    """A frame in torch's own files: its line's source never decides the category."""
    return bool(_TORCH.search(file))


_STDLIB = re.compile(r"/lib/python3[.\d]*/(?!site-packages/|dist-packages/)|^<")


def is_stdlib(file: str) -> bool:
    """The standard library's (by path, or a bare module name as py-spy gives for frozen ones)."""
    return bool(_STDLIB.search(file)) or ("/" not in file and os.path.splitext(file)[0] in sys.stdlib_module_names)


def classify_call(source: str) -> str | None:
    """The category of the C call a blocked line makes, from the line's source; None if unknown."""
    for category, pattern in _CALLS:
        if pattern.search(source):
            return category
    return None


# Reading and decoding (as opposed to writing): what fetching a batch does. By the function of the
# I/O library's frame ("loads", "JSONDecoder.raw_decode", "_load"), or by the blocked line's call.
_READ_FUNCS = re.compile(r"(?:^|\.)_*(?:load\w*|raw_decode|decode|read\w*|recv\w*|get\w*|urlopen|unpickle\w*|"
                         r"safe_open|iter_\w+|download\w*)$")
_READ_CALLS = re.compile(r"\.(?:read|readline|readlines|readinto|recv|recv_into|recvfrom|get)\(|"
                         r"\b(?:pickle|json|torch|np|numpy)\.loads?\(|\burlopen\(")


# A checkpoint save by its function's name, outside torch (torch.utils.checkpoint recomputes
# activations): save, _save_checkpoint, save_pretrained, write_checkpoint.
_SAVE_FUNCS = re.compile(r"(?:^|\.)_*(?:(?:save|checkpoint)(?:_\w+)?|\w+_(?:save|checkpoint))$")


def is_io_file(file: str) -> bool:
    """A frame of serialization or file/network I/O code (torch.save, json, sockets, safetensors)."""
    return any(f in file for f in _IO_FILES)


def is_io_read(stack: list[Frame], leaf_source: str = "") -> bool:
    """An I/O sample that reads or decodes (json.loads, pickle.load, f.read, a GET), not one that
    writes (torch.save, json.dump, f.write, fsync): inside the loop's call for its next batch,
    that is producing the batch, not the loop's own I/O."""
    for func, file in reversed(stack):
        if is_io_file(file):
            return bool(_READ_FUNCS.search(func))
    return bool(leaf_source and _READ_CALLS.search(leaf_source))


def classify_main(stack: list[Frame], leaf_source: str = "", device: bool = True) -> str:
    """The category of one sample of the training process's main thread.

    `leaf_source` is the source of the statement the innermost frame is at, when the
    probe could read it (empty otherwise); it is used unless that frame is torch's own.
    `device`: the process uses a GPU. Without one, `.tolist()`, `.item()` or `.cpu()` wait for
    no device: they are CPU work (a tokenizer's `.tolist()` once hid a CPU-bound `get_batch`).
    """
    for i, frame in enumerate(stack):
        func, file = frame
        if _DATALOADER in file:
            if func in _STARTUP_FUNCS:
                return STARTUP
            if func.endswith("__next__") or func.endswith("_next_data"):
                return PRODUCE if _producing(stack, i) else DATA_WAIT
    if leaf_source and stack and not in_torch(stack[-1][1]):
        called = classify_call(leaf_source)
        if called is not None and (device or called != DEVICE_SYNC):
            return called
    leaf_first = list(reversed(stack))
    for frame in leaf_first:
        if _in(frame, *_ANOMALY_FILES):
            # Traceback capture called from inside the model: anomaly mode's per-op record
            # (torch.fx.traceback.format_stack). Not while dynamo or fx trace the model.
            in_model = any(_in(f, "torch/nn/modules/module.py", "torch/autograd/", "torch/_tensor.py") for f in stack)
            tracing = any("torch/_dynamo/" in f[1] or ("torch/fx/" in f[1] and "traceback.py" not in f[1])
                          for f in stack)
            if (in_model or stack[0][0] == "walk_stack") and not tracing:
                return ANOMALY
        # record_function scopes (every optimizer step opens one) run whether or not a
        # profiler listens; the profiler's own Python side (enter/exit, event parsing) does not.
        if _in(frame, *_PROFILER_FILES) and "record_function" not in frame[0]:
            return PROFILER
        if _in(frame, *_IO_FILES):
            return IO
        if _in(frame, *_COLLECTIVE_FILES):
            return COLLECTIVE
        if "torch/cuda/" in frame[1] and frame[0].endswith("synchronize"):
            return DEVICE_SYNC
        if _in(frame, *_LOCK_FILES):
            return LOCK_WAIT
    closure = False  # code outside torch below an optimizer frame: the closure it calls
    for frame in leaf_first:
        func, file = frame
        if "torch/optim/" in file and not closure:
            # Only the update itself: a closure's forward and backward are found first (they are
            # inner), and what else it runs (a trainer's logging in its training_step) is not the
            # optimizer's work.
            return OPTIMIZER
        if ("torch/_tensor.py" in file and func.endswith("backward")) or "torch/autograd/__init__.py" in file \
                or "torch/autograd/graph.py" in file:
            return BACKWARD
        if "torch/nn/modules/module.py" in file and func.endswith(("_call_impl", "_wrapped_call_impl")):
            return FORWARD
        if not in_torch(file) and not is_stdlib(file):
            closure = True
    if any(_SAVE_FUNCS.search(func) for func, file in stack if not in_torch(file) and not is_stdlib(file)):
        # Inside a checkpoint save (a trainer's _save_checkpoint, the job's save_checkpoint):
        # gathering state dicts and RNG states is part of the write's cost (a Trainer's save
        # every step was 22% of the time, its file writes alone 13%).
        return IO
    return OTHER


def classify_worker(stack: list[Frame]) -> str:
    """The category of one sample of a DataLoader worker process's main thread.

    A forked worker's stack still shows the parent's frames down to the fork;
    what matters is what sits below `_worker_loop`.
    """
    for i, (func, file) in enumerate(stack):
        if _WORKER in file and func.endswith("_worker_loop"):
            below = stack[i + 1:]
            if not below:
                return WORKER_IDLE
            if _producing(stack, i + 1):
                return PRODUCE
            nxt_func, nxt_file = below[0]
            if "multiprocessing/" in nxt_file or nxt_file.endswith("queue.py") or "threading.py" in nxt_file:
                return WORKER_IDLE
            if "torch/" in nxt_file:
                return WORKER_IDLE if "get" in nxt_func.lower() else OTHER
            return STARTUP  # user code called straight from _worker_loop: the worker_init_fn
    return STARTUP  # not in the worker loop yet: the worker is starting (fork/spawn bootstrap)


@dataclass
class ThreadSample:
    """One collapsed stack with how many times it was seen."""

    pid: int
    role: str  # "main" (the training process) or "worker"
    thread: str
    stack: list[Frame]
    count: int
    category: str = ""
    # The innermost frame's line number, and the source of its statement when the probe read it.
    leaf_line: int | None = None
    leaf_source: str = ""
    # Each frame's line, root first beside `stack` (empty where the sampler gave none).
    lines: list[int | None] = field(default_factory=list)


@dataclass
class StackSummary:
    """Counts per category for the main thread and for workers; CPU (active) counts beside all counts."""

    main_all: dict[str, int] = field(default_factory=dict)
    main_active: dict[str, int] = field(default_factory=dict)
    worker_all: dict[str, int] = field(default_factory=dict)
    worker_active: dict[str, int] = field(default_factory=dict)
    worker_pids: set[int] = field(default_factory=set)

    @property
    def main_total(self) -> int:
        return sum(self.main_all.values())

    @property
    def worker_total(self) -> int:
        return sum(self.worker_all.values())

    def main_share(self, *categories: str) -> float | None:
        total = self.main_total
        return sum(self.main_all.get(c, 0) for c in categories) / total if total else None

    def worker_share(self, *categories: str) -> float | None:
        total = self.worker_total
        return sum(self.worker_all.get(c, 0) for c in categories) / total if total else None


def dataloader_worker_pids(samples: list[ThreadSample]) -> set[int]:
    """Child processes that are DataLoader workers: their stacks run through torch.utils.data
    (a forked worker also shows the parent's frames down to the fork). Other children
    (ranks, compile workers, helpers) are not workers."""
    return {s.pid for s in samples if s.role == "worker" and any("torch/utils/data/" in f[1] for f in s.stack)}


def summarize(all_samples: list[ThreadSample], active_samples: list[ThreadSample],
              device: bool = True) -> StackSummary:
    """Fold samples taken with --idle (all) and without (on-CPU only) into one summary."""
    summary = StackSummary()
    workers_seen = dataloader_worker_pids(all_samples) | dataloader_worker_pids(active_samples)
    for samples, main, workers in ((all_samples, summary.main_all, summary.worker_all),
                                   (active_samples, summary.main_active, summary.worker_active)):
        for s in samples:
            if s.thread != "MainThread" or (s.role == "worker" and s.pid not in workers_seen):
                continue
            s.category = classify_main(s.stack, s.leaf_source, device) if s.role == "main" else classify_worker(s.stack)
            bucket = main if s.role == "main" else workers
            bucket[s.category] = bucket.get(s.category, 0) + s.count
            if s.role == "worker":
                summary.worker_pids.add(s.pid)
    return summary
