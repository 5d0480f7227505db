"""stacks.native on real jobs: the precision a running process's matmuls use, read from outside by
the kernel's sampler (no thread stopped), and py-spy --native only where the kernel refuses."""

from __future__ import annotations

import subprocess
import sys
import time
import types

import pytest

from fieldguide.probes import native_stacks
from fieldguide.probes.base import ProbeContext
from fieldguide.probes.native_stacks import NativeStacks
from tests.unit.test_perf_samples import needs_sampler

MATMULS = """
import time, torch
torch.set_num_threads(1)
a = torch.randn(256, 256, dtype=torch.{dtype})
print("ready", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    a @ a
"""


def read(dtype: str, **params: object) -> object:
    pytest.importorskip("torch")
    child = subprocess.Popen([sys.executable, "-c", MATMULS.format(dtype=dtype)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        target = types.SimpleNamespace(pid=child.pid, alive=lambda: child.poll() is None)
        return NativeStacks().run(ProbeContext(target=target), **params)  # type: ignore[arg-type]
    finally:
        child.kill()
        child.wait()


@needs_sampler
@pytest.mark.parametrize(("dtype", "slow"), [("float64", True), ("float32", False)])
def test_a_jobs_matmul_precision_is_read_by_the_kernels_sampler(dtype: str, slow: bool) -> None:
    m = read(dtype, seconds=1.0)
    assert m.ok, m.reason
    assert "perf_event_open" in m.provenance and "no thread stopped" in m.provenance
    assert m.values["blas_samples"] >= 20, m.values
    assert (m.values["slow_dtype_fraction"] > 0.9) is slow, m.values
    assert (m.values["slow_dtype"] == "float64") is slow


def test_where_the_kernel_refuses_py_spy_reads_the_stacks_and_says_why(monkeypatch) -> None:
    from fieldguide.host import access

    monkeypatch.setattr(NativeStacks, "_sample_in_kernel",
                        staticmethod(lambda pid, seconds, rate: ("", 0, "the kernel refused perf_event_open (EACCES)")))
    monkeypatch.setattr(access, "py_spy_path", lambda: "/bin/py-spy")
    monkeypatch.setattr(NativeStacks, "_record", staticmethod(
        lambda spy, pid, seconds, rate: ("main;mkl_blas_dgemm (libtorch_cpu.so) 9\nmain;sgemm_ (x.so) 1\n", "")))
    target = types.SimpleNamespace(pid=1, alive=lambda: True)
    m = NativeStacks().run(ProbeContext(target=target))  # type: ignore[arg-type]
    assert m.ok and m.values["slow_dtype_fraction"] == 0.9
    assert "py-spy record --native" in m.provenance and "refused perf_event_open" in m.provenance


def test_a_name_from_the_jobs_files_cannot_forge_samples(monkeypatch) -> None:
    """A symbol named with a newline and a count is one sample of one odd name, not 1000 of dgemm."""
    from fieldguide.host import elf_symbols, perf_samples

    monkeypatch.setattr(perf_samples, "sample_ips", lambda pid, seconds, rate: perf_samples.PerfSamples(
        ips=[1, 2, 2], threads=1))
    monkeypatch.setattr(elf_symbols, "symbolize", lambda pid, ips: {1: "x 5\nmkl_blas_dgemm 1000", 2: "cblas_sgemm"})
    raw, _, refused = native_stacks.NativeStacks._sample_in_kernel(1, 0.1, 100)
    assert refused is None
    assert native_stacks.blas_counts(raw) == {"d": 1, "s": 2}


def test_openmp_waits_are_left_out_of_the_whole(monkeypatch) -> None:
    """A thread spinning at an OpenMP barrier waits for some op's other threads: neither float64
    work nor float32, so the precision's share is of the samples that did work."""
    from fieldguide.host import elf_symbols, perf_samples

    monkeypatch.setattr(perf_samples, "sample_ips", lambda pid, seconds, rate: perf_samples.PerfSamples(
        ips=[1] * 6 + [2] * 3 + [3] * 2 + [4] * 5 + [5], threads=2))
    monkeypatch.setattr(elf_symbols, "symbolize", lambda pid, ips: {
        1: "[libgomp.so.1]", 2: "gomp_team_barrier_wait_end", 3: "__kmp_wait_yield", 4: "mkl_blas_avx2_dgemm_kernel_0",
        5: "_PyEval_EvalFrameDefault"})
    raw, waits, _ = native_stacks.NativeStacks._sample_in_kernel(1, 0.1, 100)
    assert waits == 11
    assert native_stacks.blas_counts(raw) == {"d": 5}
    assert sum(int(line.rpartition(" ")[2]) for line in raw.splitlines()) == 6
