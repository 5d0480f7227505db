"""Where a process's threads are on the CPU, read by the kernel's own sampler (perf_event_open,
the software task clock): each thread's user-space instruction pointer, a few hundred times a
second, with no thread ever stopped.

py-spy --native stops a job's threads for each native unwind, and on its first sample for as long
as it takes to read libtorch's symbols (0.3-0.4 s on a 2-core machine). The kernel's sampler only
writes the interrupted address into a ring buffer the reader maps: the job pays an interrupt per
sample, microseconds, and symbols are read afterwards in fieldguide's own process.

Linux only (x86_64 and aarch64); the kernel may refuse (perf_event_paranoid, a container without
CAP_PERFMON, seccomp): `sample_ips` then says why, and the caller reads another way.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import platform
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

# perf_event_open's syscall number by machine (asm/unistd.h).
SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_TASK_CLOCK = 1  # nanoseconds a thread ran: samples land only while it is on a CPU
PERF_SAMPLE_IP, PERF_SAMPLE_TID = 1 << 0, 1 << 1
ATTR_DISABLED, ATTR_EXCLUDE_KERNEL, ATTR_EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6
PERF_FLAG_FD_CLOEXEC = 1 << 3
IOC_ENABLE, IOC_DISABLE = 0x2400, 0x2401
RECORD_SAMPLE, RECORD_LOST = 9, 2
ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0: every kernel since 2.6.31 takes it
DATA_PAGES = 4  # 16 KiB a thread: ~680 samples of 24 bytes, over 3 s at 200 Hz
MAX_THREADS = 512


@dataclass
class PerfSamples:
    """User-space addresses sampled from a process's threads, or why none could be."""

    ips: list[int] = field(default_factory=list)
    threads: int = 0
    lost: int = 0
    error: str | None = None


def _attr(period_ns: int) -> ctypes.Array[ctypes.c_char]:
    flags = ATTR_DISABLED | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV
    packed = struct.pack("<IIQQQQQIIQ", PERF_TYPE_SOFTWARE, ATTR_SIZE, PERF_COUNT_SW_TASK_CLOCK, period_ns,
                         PERF_SAMPLE_IP | PERF_SAMPLE_TID, 0, flags, 0, 0, 0)
    return ctypes.create_string_buffer(packed, ATTR_SIZE)


def _refusal(code: int) -> str:
    if code in (errno.EACCES, errno.EPERM):
        try:
            paranoid = Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip()
        except OSError:
            paranoid = "unreadable"
        return (f"the kernel refused perf_event_open ({os.strerror(code)}; kernel.perf_event_paranoid={paranoid}, "
                "or a container without CAP_PERFMON)")
    if code in (errno.ENOSYS, errno.ENOENT, errno.EOPNOTSUPP):
        return f"this kernel has no software task-clock sampler ({os.strerror(code)})"
    if code == errno.ESRCH:
        return "the process ended before it could be sampled"
    return f"perf_event_open failed ({os.strerror(code)})"


class _Thread:
    """One thread's sampling event and its mapped ring buffer."""

    def __init__(self, fd: int, pages: int) -> None:
        self.fd = fd
        self.ring = mmap.mmap(fd, (1 + pages) * mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def read(self, into: PerfSamples) -> None:
        ring = self.ring
        head = struct.unpack_from("<Q", ring, 1024)[0]
        offset, size = struct.unpack_from("<QQ", ring, 1040)
        if not size:  # kernels before 4.1 leave these zero: data follows the first page
            offset, size = mmap.PAGESIZE, len(ring) - mmap.PAGESIZE
        # The tail never moved, so the kernel stopped at a full buffer: nothing wrapped.
        pos, end = 0, min(head, size)
        while pos + 8 <= end:
            kind, _misc, length = struct.unpack_from("<IHH", ring, offset + pos)
            if length < 8:
                break
            if kind == RECORD_SAMPLE and length >= 24:
                into.ips.append(struct.unpack_from("<Q", ring, offset + pos + 8)[0])
            elif kind == RECORD_LOST and length >= 24:
                into.lost += struct.unpack_from("<Q", ring, offset + pos + 16)[0]
            pos += length

    def close(self) -> None:
        try:
            self.ring.close()
        finally:
            os.close(self.fd)


def sample_ips(pid: int, seconds: float, rate: int = 100) -> PerfSamples:
    """Each thread of `pid` sampled `rate` times a second of its own CPU time, for `seconds`: the
    user-space address it was running. Threads started meanwhile are not seen."""
    number = SYSCALL.get(platform.machine())
    if number is None or platform.system() != "Linux":
        return PerfSamples(error=f"no perf_event_open binding for {platform.system()} {platform.machine()}")
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))[:MAX_THREADS]
    except OSError as err:
        return PerfSamples(error=f"cannot list the process's threads ({err.strerror})")
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _attr(max(1, int(1e9 / max(rate, 1))))
    threads: list[_Thread] = []
    result = PerfSamples()
    try:
        for tid in tids:
            fd = libc.syscall(number, attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
            if fd < 0:
                code = ctypes.get_errno()
                if code == errno.ESRCH:  # that thread ended meanwhile
                    continue
                result.error = _refusal(code)
                return result
            try:
                threads.append(_Thread(fd, DATA_PAGES))
            except (OSError, ValueError) as err:
                os.close(fd)
                result.error = f"cannot map the sampler's buffer ({err})"
                return result
        if not threads:
            result.error = _refusal(errno.ESRCH)
            return result
        for thread in threads:
            fcntl.ioctl(thread.fd, IOC_ENABLE, 0)
        time.sleep(seconds)
        for thread in threads:
            fcntl.ioctl(thread.fd, IOC_DISABLE, 0)
        for thread in threads:
            thread.read(result)
        result.threads = len(threads)
        return result
    finally:
        for thread in threads:
            thread.close()
