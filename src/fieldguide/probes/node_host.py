"""Is this machine fit to train: the host's side, read with no process (node-check). The cores
the process may use against the cores there are, /dev/shm for DataLoader workers, free memory,
the open-file limit, the CPU frequency governor, and whether `fieldguide calibrate` has run."""

from __future__ import annotations

import os
import time
from pathlib import Path

from fieldguide.measurement import Measurement
from fieldguide.probes import register
from fieldguide.probes.base import Probe, ProbeContext

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPUFREQ = Path("/sys/devices/system/cpu")


def cgroup_cpus(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[float | None, str]:
    """The cores this process's cgroup may use (quota / period), None where unlimited, and the
    file it was read from. cgroup v2 (`cpu.max`), else v1 (`cpu.cfs_quota_us`)."""
    paths = {"": "/"}
    try:
        for line in self_cgroup.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(","):
                paths[name] = path
    except (OSError, ValueError):
        pass
    v2 = [root / paths[""].lstrip("/") / "cpu.max", root / "cpu.max"]
    for candidate in v2:
        try:
            quota, period = candidate.read_text().split()[:2]
        except (OSError, ValueError):
            continue
        return (None if quota == "max" else int(quota) / int(period)), str(candidate)
    v1_path = paths.get("cpu", "/").lstrip("/")
    for folder in (root / "cpu" / v1_path, root / "cpu,cpuacct" / v1_path, root / "cpu", root / "cpu,cpuacct"):
        try:
            quota_us = int((folder / "cpu.cfs_quota_us").read_text())
            period_us = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return (None if quota_us < 0 else quota_us / period_us), str(folder / "cpu.cfs_quota_us")
    return None, "no cgroup CPU controller found"


@register
class NodeCpus(Probe):
    id = "node.cpus"
    title = "The cores this process may use (affinity, cgroup quota) against the cores there are"
    params = {}
    values = {"cpu_count": "", "usable_cpus": "", "cgroup_cpus": "", "cpu_limit_fraction": "fraction"}

    def run(self, ctx: ProbeContext) -> Measurement:
        count = os.cpu_count() or 1
        usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else count
        quota, source = cgroup_cpus()
        limit = min(usable, quota) if quota is not None else usable
        return self.measurement(values={"cpu_count": count, "usable_cpus": usable,
                                        "cgroup_cpus": None if quota is None else round(quota, 2),
                                        "cpu_limit_fraction": round(limit / count, 3)},
                                provenance=f"os.cpu_count, sched_getaffinity, {source}")


@register
class NodeShm(Probe):
    id = "node.shm"
    title = "/dev/shm: where DataLoader workers hand their batches over"
    params = {}
    values = {"shm_mb": "MB", "shm_free_mb": "MB"}

    def run(self, ctx: ProbeContext, path: str = "/dev/shm") -> Measurement:
        try:
            stat = os.statvfs(path)
        except OSError as err:
            return self.cannot(f"{path} cannot be read ({err.strerror or err})", applicable=False)
        return self.measurement(values={"shm_mb": round(stat.f_blocks * stat.f_frsize / 2**20),
                                        "shm_free_mb": round(stat.f_bavail * stat.f_frsize / 2**20)},
                                provenance=f"statvfs({path})")


@register
class NodeMemory(Probe):
    id = "node.memory"
    title = "Memory free for a job, and swap in use"
    params = {}
    values = {"memory_total_mb": "MB", "memory_available_mb": "MB", "memory_available_fraction": "fraction",
              "swap_used_mb": "MB"}

    def run(self, ctx: ProbeContext) -> Measurement:
        import psutil

        mem, swap = psutil.virtual_memory(), psutil.swap_memory()
        return self.measurement(values={"memory_total_mb": round(mem.total / 2**20),
                                        "memory_available_mb": round(mem.available / 2**20),
                                        "memory_available_fraction": round(mem.available / mem.total, 3),
                                        "swap_used_mb": round(swap.used / 2**20)},
                                provenance="psutil.virtual_memory, swap_memory")


@register
class NodeFiles(Probe):
    id = "node.files"
    title = "The open-file limit (DataLoader workers share tensors through file descriptors)"
    params = {}
    values = {"nofile_soft": "", "nofile_hard": "", "nofile_unlimited": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        unlimited = resource.RLIM_INFINITY
        return self.measurement(values={"nofile_soft": None if soft == unlimited else soft,
                                        "nofile_hard": None if hard == unlimited else hard,
                                        "nofile_unlimited": soft == unlimited},
                                provenance="getrlimit(RLIMIT_NOFILE) of this shell's session (ulimit -n)")


@register
class NodeCpuFreq(Probe):
    id = "node.cpufreq"
    title = "The CPU frequency governor"
    params = {}
    values = {"cpu_governor": "", "governor_powersave": ""}

    def run(self, ctx: ProbeContext, root: str = str(CPUFREQ)) -> Measurement:
        governors = set()
        for path in Path(root).glob("cpu[0-9]*/cpufreq/scaling_governor"):
            try:
                governors.add(path.read_text().strip())
            except OSError:
                continue
        if not governors:
            return self.cannot(f"no cpufreq governor under {root} (a VM or a container often has none): "
                               "nothing to judge", applicable=False)
        named = ", ".join(sorted(governors))
        return self.measurement(values={"cpu_governor": named, "governor_powersave": "powersave" in governors},
                                provenance=f"{root}/cpu*/cpufreq/scaling_governor")


@register
class NodeCalibration(Probe):
    id = "node.calibration"
    title = "Whether `fieldguide calibrate` has measured this machine"
    params = {}
    values = {"calibrated": "", "calibrated_at": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        from fieldguide.calibrate.cache import cache_dir, cached_for_host, host

        started = time.monotonic()
        found = cached_for_host()
        newest = found[0] if found else None
        return self.measurement(values={"calibrated": bool(found),
                                        "calibrated_at": getattr(newest, "created", None)},
                                seconds=time.monotonic() - started,
                                provenance=f"calibrations of host {host()} under {cache_dir()}")
