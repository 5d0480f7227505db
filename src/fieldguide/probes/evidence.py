"""Evidence kinds: every key a probe may leave in its measurement's evidence, declared once with
its shape. A probe lists the kinds it leaves (`Probe.evidence`, checked when it measures); the
views read a kind through `kind.of(evidence)`, never a key by name; and the report draws each
kind it shows with one section renderer (report/evidence_sections.py). A new kind is its
declaration here, the probe that leaves it, and (if a report shows it) one renderer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypedDict, TypeVar

from fieldguide.analysis.coldstart import ColdStart
from fieldguide.analysis.ranks import JobIdentity, RankRow

T = TypeVar("T")
__all__ = ["ColdStart", "JobIdentity", "RankRow"]  # declared beside what makes them; named here with the other kinds


class Artifact(TypedDict, total=False):
    """A file a walk leaves for a viewer people already open: its kind, where it is (absolute),
    how to open it (speedscope, Perfetto, tlparse, memory_viz), and where a tool reads it, the
    command that does."""

    kind: str
    path: str
    open_with: str
    command: str
    href: str  # the path relative to the report's folder, where it is beside it: links that travel


class StackShare(TypedDict, total=False):
    """One of the most frequent stacks: its share of the samples (main thread) or its samples
    (DataLoader workers), what it was doing, and the stack, innermost frame first."""

    share: float
    samples: int
    category: str
    stack: str


class CategoryCount(TypedDict):
    samples: int
    on_cpu: int  # of those, the thread was on a CPU (py-spy's active samples)


@dataclass(frozen=True)
class EvidenceKind(Generic[T]):
    """One evidence key and what it holds. `shown`: a report draws it (with the renderer that
    report/evidence_sections.py registers for it); otherwise it is kept in the JSON report only,
    for charts, the TUI's views and a person reading the raw evidence."""

    key: str
    what: str
    shown: bool = False

    def of(self, evidence: Mapping[str, Any] | None) -> T | None:
        """This kind's payload in one node's evidence, or None where the node left none."""
        if not isinstance(evidence, Mapping):
            return None
        found = evidence.get(self.key)
        return None if found is None or found == [] or found == {} else found


Rows = list[dict[str, Any]]

# What a report shows
TABLE: EvidenceKind[Rows] = EvidenceKind(
    "table", "what the node found, row by row (graph breaks with their lines, recompiles, ranks)", shown=True)
TOP_STACKS: EvidenceKind[list[StackShare]] = EvidenceKind(
    "top_stacks", "the main thread's most frequent stacks", shown=True)
TOP_WORKER_STACKS: EvidenceKind[list[StackShare]] = EvidenceKind(
    "top_worker_stacks", "the DataLoader workers' most frequent stacks", shown=True)
COLD_START: EvidenceKind[ColdStart] = EvidenceKind("cold_start", "the job's start, phase by phase", shown=True)
TORCH_TRACE: EvidenceKind[str] = EvidenceKind("torch_trace", "where the job's TORCH_TRACE log went", shown=True)
RANKS: EvidenceKind[list[RankRow]] = EvidenceKind("ranks", "each rank's step, own work and waits", shown=True)
BUDGET: EvidenceKind[Rows] = EvidenceKind(
    "budget", "the step budget: every share of the training thread's time, named (probes/step_budget.py)", shown=True)
JOB: EvidenceKind[JobIdentity] = EvidenceKind(
    "job", "the multi-rank job the ranks belong to: its id, rendezvous and world size", shown=True)

# Series and raw readings: charts, the TUI and the JSON report
STEP_MS: EvidenceKind[list[float]] = EvidenceKind("step_ms", "the last steps' wall time, ms")
DATA_WAIT_MS: EvidenceKind[list[float]] = EvidenceKind("data_wait_ms", "the last steps' wait for input, ms")
EPOCH_STARTS: EvidenceKind[Rows] = EvidenceKind("epoch_starts", "the DataLoader iterators begun in the window")
INPUT_PHASE: EvidenceKind[dict[str, Any]] = EvidenceKind(
    "input_phase", "the stacks sampled while the training thread fetched input")
MAIN_CATEGORIES: EvidenceKind[dict[str, CategoryCount]] = EvidenceKind(
    "main_categories", "the main thread's samples by what it was doing")
WORKER_CATEGORIES: EvidenceKind[dict[str, CategoryCount]] = EvidenceKind(
    "worker_categories", "the DataLoader workers' samples by what they were doing")
SAMPLES: EvidenceKind[int] = EvidenceKind("samples", "the stack samples taken")
RSS_MB: EvidenceKind[list[float]] = EvidenceKind("rss_mb", "the job's resident memory over the window, MB")
MAIN_CPU_CORES: EvidenceKind[list[float]] = EvidenceKind("main_cpu_cores", "the main process's CPU, in cores")
WORKER_CPU_CORES: EvidenceKind[list[float]] = EvidenceKind("worker_cpu_cores", "the worker processes' CPU, in cores")
PER_PROCESS_CORES: EvidenceKind[dict[str, float]] = EvidenceKind("per_process_cores", "CPU cores by pid")
ROWS: EvidenceKind[list[list[Any]]] = EvidenceKind("rows", "the agent's memory rows (agent/inside/rows.MemoryRow)")
RSS: EvidenceKind[list[Any]] = EvidenceKind("rss", "resident memory readings over the window")
CENSUS: EvidenceKind[dict[str, Any]] = EvidenceKind("census", "live tensors counted by where they are kept")
GROWING: EvidenceKind[Rows] = EvidenceKind("growing", "the places whose tensors grew step after step")
KEPT_BY: EvidenceKind[Rows] = EvidenceKind("kept_by", "what keeps the growing tensors alive")
BREAKDOWN: EvidenceKind[dict[str, Any]] = EvidenceKind("breakdown", "memory by category at the peak")
MESSAGE: EvidenceKind[str] = EvidenceKind("message", "the allocator's own words (an out-of-memory message)")
CUDA: EvidenceKind[dict[str, Any]] = EvidenceKind("cuda", "the CUDA allocator's statistics")
LIMITS: EvidenceKind[dict[str, Any]] = EvidenceKind("limits", "the memory limits the job runs under")
GPU: EvidenceKind[Rows] = EvidenceKind("gpu", "the other processes on the job's GPUs")
GPU_USED: EvidenceKind[list[int]] = EvidenceKind("gpu_used", "the job's GPU memory over the window, bytes")
GPUS: EvidenceKind[Rows] = EvidenceKind("gpus", "the GPUs, as NVML reports them")
DEVICES_FROM: EvidenceKind[str] = EvidenceKind("devices_from", "how the job's GPUs were told apart")
STATE: EvidenceKind[dict[str, Any]] = EvidenceKind("state", "torch's debug and determinism switches")
TOP_OPS: EvidenceKind[Rows] = EvidenceKind("top_ops", "the operators that took the most time", shown=True)
CONFIG: EvidenceKind[dict[str, Any]] = EvidenceKind("config", "dynamo's and inductor's settings as the job ran")
FRAMES: EvidenceKind[Rows] = EvidenceKind("frames", "the compiled frames, with their graphs")
REASONS: EvidenceKind[dict[str, int]] = EvidenceKind("reasons", "graph breaks counted by reason")
COMPILED_MS: EvidenceKind[list[float]] = EvidenceKind("compiled_ms", "the compiled arm's steps, ms")
EAGER_MS: EvidenceKind[list[float]] = EvidenceKind("eager_ms", "the eager arm's steps, ms")
TURNS: EvidenceKind[Rows] = EvidenceKind("turns", "the A/B's turns: arm, steps, seconds")
DEVICE_MS: EvidenceKind[list[float]] = EvidenceKind("device_ms", "the steps' device time, ms")
HOST_MS: EvidenceKind[list[float]] = EvidenceKind("host_ms", "the steps' host time, ms")
RATE: EvidenceKind[dict[str, Any]] = EvidenceKind(
    "rate", "the step's FLOPs, the rate achieved and this machine's peak, the intra-op threads", shown=True)
ARTIFACTS: EvidenceKind[list[Artifact]] = EvidenceKind(
    "artifacts", "files left for the usual viewers (speedscope, Perfetto, tlparse, memory_viz)")

KINDS: dict[str, EvidenceKind[Any]] = {kind.key: kind for kind in (
    TABLE, BUDGET, TOP_STACKS, TOP_WORKER_STACKS, COLD_START, TORCH_TRACE, RANKS, JOB, STEP_MS, DATA_WAIT_MS, EPOCH_STARTS,
    INPUT_PHASE, MAIN_CATEGORIES, WORKER_CATEGORIES, SAMPLES, RSS_MB, MAIN_CPU_CORES, WORKER_CPU_CORES,
    PER_PROCESS_CORES, ROWS, RSS, CENSUS, GROWING, KEPT_BY, BREAKDOWN, MESSAGE, CUDA, LIMITS, GPU, GPU_USED, GPUS,
    DEVICES_FROM, STATE, TOP_OPS, CONFIG, FRAMES, REASONS, COMPILED_MS, EAGER_MS, TURNS, DEVICE_MS, HOST_MS, RATE, ARTIFACTS)}

# What the stack sampler leaves (probes/stacks.stack_values), for every probe that passes it on.
STACK_KINDS = (BUDGET, MAIN_CATEGORIES, WORKER_CATEGORIES, TOP_STACKS, TOP_WORKER_STACKS, ARTIFACTS)


def undeclared(evidence: Mapping[str, Any], declared: tuple[EvidenceKind[Any], ...]) -> list[str]:
    """The keys of `evidence` that none of `declared` names: a probe leaving what it never declared."""
    keys = {kind.key for kind in declared}
    return sorted(k for k in evidence if k not in keys)
