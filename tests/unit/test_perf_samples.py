"""The kernel's task-clock sampler on a real process: a busy thread is sampled at about the rate
asked of its CPU time, a sleeping one hardly at all, and a refusal is a reason, never an exception."""

from __future__ import annotations

import errno
import subprocess
import sys
import time

import pytest

from fieldguide.host import perf_samples
from fieldguide.host.elf_symbols import symbolize
from fieldguide.host.perf_samples import sample_ips

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: sum(range(1000))"
IDLE = "import time\ntime.sleep(30)"


def sampled(code: str, seconds: float = 1.0, rate: int = 100) -> perf_samples.PerfSamples:
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.4)
        result = sample_ips(child.pid, seconds, rate)
        result.names = symbolize(child.pid, result.ips)  # type: ignore[attr-defined]
        return result
    finally:
        child.kill()
        child.wait()


def kernel_refuses() -> str | None:
    probe = subprocess.Popen([sys.executable, "-c", IDLE])
    try:
        return sample_ips(probe.pid, 0.05).error
    finally:
        probe.kill()
        probe.wait()


REFUSED = kernel_refuses()
needs_sampler = pytest.mark.skipif(REFUSED is not None, reason=f"the kernel's sampler is not available: {REFUSED}")


@needs_sampler
def test_a_busy_thread_is_sampled_at_the_rate_asked() -> None:
    result = sampled(BUSY, seconds=1.0, rate=100)
    assert result.error is None and result.threads >= 1
    # 100 Hz of one thread's CPU time over 1 s: about 100 (a shared 2-core box gives it less).
    assert 30 <= len(result.ips) <= 130, len(result.ips)
    named = [result.names.get(ip) for ip in result.ips]  # type: ignore[attr-defined]
    assert sum(n is not None for n in named) >= 0.8 * len(named), named[:20]


@needs_sampler
def test_a_sleeping_process_gives_almost_no_samples() -> None:
    assert len(sampled(IDLE, seconds=1.0, rate=100).ips) <= 5


def test_a_process_that_is_gone_or_unlisted_gives_a_reason() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    result = sample_ips(child.pid, 0.1)
    assert result.ips == [] and result.error and "thread" in result.error


@pytest.mark.parametrize(("code", "says"), [(errno.EACCES, "perf_event_paranoid"), (errno.EPERM, "CAP_PERFMON"),
                                            (errno.ENOSYS, "no software task-clock sampler"),
                                            (errno.EINVAL, "perf_event_open failed")])
def test_a_kernel_refusal_is_a_reason(monkeypatch, code: int, says: str) -> None:
    class Refusing:
        def syscall(self, *args: object) -> int:
            return -1

    monkeypatch.setattr(perf_samples.ctypes, "CDLL", lambda *a, **k: Refusing())
    monkeypatch.setattr(perf_samples.ctypes, "get_errno", lambda: code)
    result = sample_ips(1, 0.1)
    assert result.ips == [] and says in (result.error or ""), result.error


def test_an_unknown_machine_is_not_sampled(monkeypatch) -> None:
    monkeypatch.setattr(perf_samples.platform, "machine", lambda: "riscv64")
    assert "no perf_event_open binding" in (sample_ips(1, 0.1).error or "")
