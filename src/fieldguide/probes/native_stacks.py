"""The dtype of a job's arithmetic, read from outside: where its threads run native code, in BLAS
kernels, which name their precision (s/d/c/z: single, double, complex single, complex double:
`mkl_blas_dgemm`, `dgemm_kernel_HASWELL`, `cblas_sgemm`).

The kernel's own sampler (perf_event_open on the task clock) reads each thread's instruction
pointer without stopping it, and the names are looked up afterwards in fieldguide's process. Where
the kernel refuses, py-spy --native reads the stacks instead; it stops each thread for each unwind
(and refuses --nonblocking), so that window is short and sparse. Either runs only at the node that
asks, on a job already found compute-bound.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from fieldguide.host.samplers import lower_priority, reap
from fieldguide.host.samplers import stop as stop_samplers
from fieldguide.host.watchdog import claim
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import NEEDS_PROCESS, Probe, ProbeContext

# A BLAS level-2/3 routine by its precision letter, as MKL, OpenBLAS and the reference CBLAS name
# them (the letter starts the name or follows an underscore).
BLAS = re.compile(r"(?:^|[_:\s])([sdcz])(gemm|gemv|symm|syrk|syr2k|trmm|trsm|gemm3m)(?:_|\b|$)", re.IGNORECASE)
DOUBLE = {"d", "z"}
UNSAFE_IN_NAME = re.compile(r"[\s;]")
# Where a thread waits at an OpenMP barrier or spins for work: the wait of some parallel op, not
# arithmetic of any dtype. Left out of the sampled whole (an instruction pointer alone cannot say
# which op the wait belongs to).
OPENMP_RUNTIME = re.compile(r"^(\[(libgomp|libiomp5|libomp)[.\]]|gomp_|GOMP_|__kmp)")
PRECISION = {"s": "single (float32)", "d": "double (float64)", "c": "complex single", "z": "complex double"}


def blas_counts(raw: str) -> dict[str, int]:
    """Samples by BLAS precision letter in py-spy's raw output (`frame;frame;... count`): a sample
    counts once, for its innermost BLAS frame."""
    counts: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        for frame in reversed(stack.split(";")):
            name = frame.split(" (", 1)[0]
            found = BLAS.search(name)
            if found:
                letter = found.group(1).lower()
                counts[letter] = counts.get(letter, 0) + int(count)
                break
    return counts


@register
class NativeStacks(Probe):
    id = "stacks.native"
    title = "Where the job's threads run native code, in BLAS kernels: the precision its matmuls run in"
    needs = frozenset({NEEDS_PROCESS})
    evidence_kinds = (ev.TABLE,)
    params = {"seconds": 2.0, "rate": 10, "kernel_rate": 100}
    values = {"slow_dtype_fraction": "fraction", "slow_dtype": "", "precision_share": "fraction", "blas_samples": "",
              "samples": "", "dtype_mix": "",
              "precision_from": ""}

    def run(self, ctx: ProbeContext, seconds: float = 2.0, rate: int = 10, kernel_rate: int = 100) -> Measurement:
        pid = ctx.target.pid
        if pid is None:
            return self.cannot("no target process")
        started = time.monotonic()
        self.reading(ctx, status=f"reading the precision of the job's BLAS kernels for {seconds:g} s")
        raw, waits, refused = self._sample_in_kernel(pid, seconds, kernel_rate)
        error = ""
        provenance = (f"the kernel's task-clock sampler (perf_event_open), {kernel_rate} Hz of each thread's CPU "
                      f"time, {seconds:g} s; no thread stopped; {waits} samples in the OpenMP runtime's waits left "
                      "out")
        if refused:
            from fieldguide.host.access import classify_py_spy_failure, py_spy_path

            spy = py_spy_path()
            if spy is None:
                return self.cannot(f"{refused}, and py-spy is not installed (pip install py-spy)")
            raw, error = self._record(spy, pid, seconds, rate)
            provenance = (f"py-spy record --native, {rate} Hz, {seconds:g} s (each sample stops the job's threads for "
                          f"one native unwind; {refused})")
        elapsed = time.monotonic() - started
        if not raw.strip():
            if not ctx.target.alive():
                return self.cannot(ctx.target.gone_reason(), seconds=elapsed, applicable=False)
            if refused:
                return self.cannot(str(classify_py_spy_failure(pid, error)), provenance=provenance, seconds=elapsed)
            return self.cannot("the job's threads ran no user-space code outside OpenMP waits while sampled", provenance=provenance,
                               seconds=elapsed)
        samples = sum(int(c) for line in raw.splitlines() if (c := line.rpartition(" ")[2]).isdigit())
        counts = blas_counts(raw)
        blas = sum(counts.values())
        if not blas:
            return self.cannot(f"no BLAS kernel in {samples} native samples: the step's dtype cannot be read from "
                               "outside (a GPU's kernels, or matmuls too short to be sampled)", applicable=False,
                               provenance=provenance, seconds=elapsed)
        double = sum(counts.get(letter, 0) for letter in DOUBLE)
        mix = ", ".join(f"{PRECISION.get(k, k)} {n}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        values = {"slow_dtype_fraction": double / blas, "slow_dtype": "float64" if double else "",
                  "precision_share": double / samples if samples else None,
                  "blas_samples": blas, "samples": samples, "dtype_mix": f"BLAS samples: {mix}",
                  "precision_from": "the line that set it is named by a launched walk (fieldguide diagnose -- CMD)"}
        return self.measurement(values=values, provenance=provenance, seconds=elapsed,
                                evidence={"table": [{"BLAS precision": PRECISION.get(k, k), "samples": n}
                                                    for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]})

    @staticmethod
    def _sample_in_kernel(pid: int, seconds: float, rate: int) -> tuple[str, int, str | None]:
        """The sampled functions as py-spy's raw lines (`name count`) and the samples left out as
        OpenMP waits; or why the kernel refused."""
        from fieldguide.host.elf_symbols import symbolize
        from fieldguide.host.perf_samples import sample_ips

        sampled = sample_ips(pid, seconds, rate)
        if sampled.error is not None:
            return "", 0, sampled.error
        names = symbolize(pid, sampled.ips)
        counts: dict[str, int] = {}
        waits = 0
        for ip in sampled.ips:
            # The job's own files name these: no separator of the raw format survives in a name.
            name = UNSAFE_IN_NAME.sub("_", names.get(ip, "[unknown]"))
            if OPENMP_RUNTIME.match(name):
                waits += 1
                continue
            counts[name] = counts.get(name, 0) + 1
        return "".join(f"{name} {count}\n" for name, count in counts.items()), waits, None

    @staticmethod
    def _record(spy: str, pid: int, seconds: float, rate: int) -> tuple[str, str]:
        with tempfile.TemporaryDirectory(prefix="fieldguide-native-") as tmp:
            claim(Path(tmp))
            out, err_path = Path(tmp) / "native.txt", Path(tmp) / "native.err"
            cmd = [spy, "record", "--pid", str(pid), "--native", "--rate", str(rate), "--duration",
                   str(max(1, int(round(seconds)))), "--format", "raw", "--output", str(out)]
            with open(err_path, "w") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                        env=dict(os.environ, RUST_BACKTRACE="0"))
            lower_priority(proc.pid)
            deadline = time.monotonic() + seconds + 10
            while reap(proc) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            stop_samplers([proc], grace=2.0)
            return (out.read_text() if out.exists() else ""), err_path.read_text(errors="replace")
