"""A window of NVML samples on the GPUs a job uses, and what they add up to. The summary is pure.

Which GPUs: those where a process of the job holds a CUDA context (NVML's process list), else
the ones its `CUDA_VISIBLE_DEVICES` names (indices in PCI order, or GPU UUIDs), else all.
Over the window: the driver's own buffer of utilization samples (not one poll: `nvidia-smi`'s
number is the share of a sample period with *any* kernel running), per-process SM and memory
utilization, SM clock against its maximum with the clock-event reasons (GPU idle is not
throttling), power against the enforced limit, temperature, PCIe rx/tx, and on Hopper-class
parts GPM's real SM activity and tensor-core activity, the one number that tells "100% busy"
from "one tiny kernel at a time".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fieldguide.analysis.stats import median
from fieldguide.host.nvml import THROTTLING, Nvml, Reading, now_us, reason_names


def job_devices(nvml: Nvml, pids: set[int], visible: str | None) -> tuple[list[int], str]:
    """The NVML indices of the job's GPUs, and how they were found."""
    count = nvml.count()
    holding = [i for i in range(count) if pids & set(nvml.compute_pids(i))]
    if holding:
        return holding, "the job's processes hold a CUDA context there (NVML process list)"
    if visible is not None and visible.strip() != "":
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        uuids = {str(nvml.read("nvmlDeviceGetUUID", nvml.handle(i)).value or ""): i for i in range(count)}
        found = []
        for item in wanted:
            if item.isdigit() and int(item) < count:
                found.append(int(item))
            else:
                found += [i for uuid, i in uuids.items() if uuid and uuid.startswith(item)]
        if found:
            return sorted(set(found)), f"CUDA_VISIBLE_DEVICES={visible} (the job holds no CUDA context yet)"
        if wanted and all(v == "-1" or v.lower() == "none" for v in wanted):
            return [], f"CUDA_VISIBLE_DEVICES={visible} hides every GPU from the job"
    return list(range(count)), "every GPU (the job holds no CUDA context and sets no CUDA_VISIBLE_DEVICES)"


@dataclass
class DeviceSamples:
    index: int
    name: str | None = None
    util: list[float] = field(default_factory=list)  # the driver's samples, %
    polled_util: list[float] = field(default_factory=list)
    clock_fraction: list[float] = field(default_factory=list)
    power_fraction: list[float] = field(default_factory=list)
    temperature: list[float] = field(default_factory=list)
    reasons: list[list[str]] = field(default_factory=list)
    pcie_tx_kbs: list[float] = field(default_factory=list)
    pcie_rx_kbs: list[float] = field(default_factory=list)
    job_sm: list[float] = field(default_factory=list)
    others_sm: list[float] = field(default_factory=list)
    job_memory_mb: float = 0.0
    others_memory_mb: float = 0.0
    others: dict[int, float] = field(default_factory=dict)  # pid -> MB
    memory: dict[int, float] = field(default_factory=dict)  # every process on the device: pid -> MB
    process_sm: dict[int, float] = field(default_factory=dict)  # pid -> highest SM % in the window
    gpm: dict[str, float] | None = None
    unsupported: dict[str, str] = field(default_factory=dict)


def sample_once(nvml: Nvml, dev: DeviceSamples, pids: set[int], since_us: int) -> None:
    """One poll of one device (on the sampling thread; every call can fail by itself)."""
    state = nvml.device(dev.index)
    dev.name = state["name"]
    dev.unsupported.update(state["unsupported"])
    if state["utilization_gpu"] is not None:
        dev.polled_util.append(float(state["utilization_gpu"]))
    if state["sm_clock_mhz"] and state["sm_clock_max_mhz"]:
        dev.clock_fraction.append(state["sm_clock_mhz"] / state["sm_clock_max_mhz"])
    if state["power_w"] is not None and state["power_limit_w"]:
        dev.power_fraction.append(state["power_w"] / state["power_limit_w"])
    if state["temperature_c"] is not None:
        dev.temperature.append(float(state["temperature_c"]))
    if state["clock_event_reasons"] is not None:
        dev.reasons.append(reason_names(state["clock_event_reasons"]))
    tx, rx = nvml.pcie_kbs(dev.index)
    if tx.ok and rx.ok:
        dev.pcie_tx_kbs.append(float(tx.value))
        dev.pcie_rx_kbs.append(float(rx.value))
    elif not tx.ok:
        dev.unsupported["pcie"] = str(tx.reason)
    memory = {p["pid"]: p["used_mb"] or 0 for p in state["processes"]}
    dev.job_memory_mb = max(dev.job_memory_mb, float(sum(mb for pid, mb in memory.items() if pid in pids)))
    dev.others = {pid: float(mb) for pid, mb in memory.items() if pid not in pids}
    dev.memory = {pid: float(mb) for pid, mb in memory.items()}
    dev.others_memory_mb = max(dev.others_memory_mb, float(sum(dev.others.values())))
    per_process = nvml.process_utilization(dev.index, since_us)
    if per_process.ok:
        by_pid = per_process.value
        for pid, (sm, _) in by_pid.items():
            dev.process_sm[pid] = max(dev.process_sm.get(pid, 0.0), sm)
        dev.job_sm.append(sum(sm for pid, (sm, _) in by_pid.items() if pid in pids))
        dev.others_sm.append(sum(sm for pid, (sm, _) in by_pid.items() if pid not in pids))
    else:
        dev.unsupported["process_utilization"] = str(per_process.reason)


def sample_window(nvml: Nvml, indices: list[int], pids: set[int], seconds: float,
                  keep_going: Callable[[float], bool] = lambda elapsed: True,
                  interval: float = 0.25) -> list[DeviceSamples]:
    """Poll the devices every `interval` for `seconds` (or until keep_going says stop), reading the
    driver's utilization buffer once at the end, and GPM between the window's two ends."""
    devices = [DeviceSamples(i) for i in indices]
    started_us = now_us()
    gpm = {d.index: nvml.gpm_begin(d.index) for d in devices}
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        for dev in devices:
            sample_once(nvml, dev, pids, started_us)
        if elapsed >= seconds or not keep_going(elapsed):
            break
        time.sleep(interval)
    for dev in devices:
        samples = nvml.utilization_samples(dev.index, started_us)
        if samples.ok:
            dev.util = [value for _, value in samples.value]
        else:
            dev.unsupported["utilization_samples"] = str(samples.reason)
        metrics: Reading = nvml.gpm_end(gpm[dev.index])
        if metrics.ok:
            dev.gpm = metrics.value
        else:
            dev.unsupported["gpm"] = str(metrics.reason)
    return devices


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summarize(devices: list[DeviceSamples], job_pids: frozenset[int] | set[int] = frozenset()
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """Values over the job's GPUs (the busiest one speaks for utilization) and why any is missing."""
    missing: dict[str, str] = {}
    if not devices:
        return {"gpus": 0}, {"gpu_util_median": "no GPU is the job's"}
    per: list[dict[str, Any]] = []
    for d in devices:
        util = d.util or d.polled_util
        throttled = [any(r in THROTTLING for r in rs) for rs in d.reasons]
        per.append({
            "index": d.index, "name": d.name,
            "util_median": median(util), "util_source": "driver samples" if d.util else "polls",
            "job_sm": median(d.job_sm), "others_sm": median(d.others_sm),
            "clock_fraction": median(d.clock_fraction), "power_fraction": median(d.power_fraction),
            "throttled_fraction": sum(throttled) / len(throttled) if throttled else None,
            "throttle_reasons": sorted({r for rs in d.reasons for r in rs if r in THROTTLING}),
            "temperature_max": max(d.temperature) if d.temperature else None,
            "pcie_rx_mb_s": (median(d.pcie_rx_kbs) or 0) / 1024 if d.pcie_rx_kbs else None,
            "pcie_tx_mb_s": (median(d.pcie_tx_kbs) or 0) / 1024 if d.pcie_tx_kbs else None,
            "job_memory_mb": d.job_memory_mb, "others_memory_mb": d.others_memory_mb,
            "sm_active": (d.gpm or {}).get("sm_active"), "tensor_active": (d.gpm or {}).get("tensor_active"),
            "sm_occupancy": (d.gpm or {}).get("sm_occupancy"), "dram_bw": (d.gpm or {}).get("dram_bw"),
            "processes": [{"pid": pid, "job": pid in job_pids, "memory_mb": d.memory.get(pid),
                           "sm_util_max": d.process_sm.get(pid)}
                          for pid in sorted(set(d.memory) | set(d.process_sm))],
        })
    busiest = max(per, key=lambda p: p["util_median"] if p["util_median"] is not None else -1)
    values: dict[str, Any] = {
        "gpus": len(per),
        "gpu_util_median": _round(busiest["util_median"], 1),
        "job_sm_util": _round(busiest["job_sm"], 1),
        "others_sm_util": _round(max((p["others_sm"] or 0.0 for p in per), default=None), 1)
        if any(p["others_sm"] is not None for p in per) else None,
        "others_memory_mb": max(p["others_memory_mb"] for p in per),
        "job_memory_mb": sum(p["job_memory_mb"] for p in per),
        "clock_fraction": _round(min((p["clock_fraction"] for p in per if p["clock_fraction"] is not None),
                                     default=None)),
        "power_fraction": _round(max((p["power_fraction"] for p in per if p["power_fraction"] is not None),
                                     default=None)),
        "throttled_fraction": _round(max((p["throttled_fraction"] for p in per if p["throttled_fraction"] is not None),
                                         default=None)),
        "throttle_reasons": ", ".join(sorted({r for p in per for r in p["throttle_reasons"]})) or "none",
        "temperature_c_max": max((p["temperature_max"] for p in per if p["temperature_max"] is not None),
                                 default=None),
        "pcie_rx_mb_s": _round(busiest["pcie_rx_mb_s"], 1),
        "pcie_tx_mb_s": _round(busiest["pcie_tx_mb_s"], 1),
        "sm_active": _round(busiest["sm_active"], 1),
        "tensor_active": _round(busiest["tensor_active"], 1),
    }
    for name, key in (("job_sm_util", "process_utilization"), ("others_sm_util", "process_utilization"),
                      ("sm_active", "gpm"), ("tensor_active", "gpm"), ("pcie_rx_mb_s", "pcie")):
        if values[name] is None:
            reasons = {d.unsupported.get(key) for d in devices if d.unsupported.get(key)}
            missing[name] = "; ".join(sorted(r for r in reasons if r)) or "no samples in the window"
    if values["gpu_util_median"] is None:
        missing["gpu_util_median"] = "; ".join(sorted({d.unsupported.get("utilization", "") for d in devices} - {""})) \
            or "no utilization readings"
    return {**values, "per_device": per}, missing


class GpuPoller:
    """A reading per GPU for a live panel: its state now, and GPM's SM activity since the last poll.

    Call `poll()` from one thread at a time (a worker's loop, which waits between polls); it opens
    NVML on first use and says why once when it cannot."""

    def __init__(self, module: Any | None = None) -> None:
        self.module = module
        self.nvml: Nvml | None = None
        self.gpm: dict[int, Reading] = {}

    def poll(self) -> tuple[list[dict[str, Any]], str | None]:
        from fieldguide.host.nvml import NvmlUnavailable

        if self.nvml is None:
            try:
                self.nvml = Nvml.open(self.module)
            except NvmlUnavailable as err:
                return [], str(err)
        rows = []
        for index in range(self.nvml.count()):
            row = self.nvml.device(index)
            previous = self.gpm.get(index)
            if previous is not None and previous.ok:
                metrics = self.nvml.gpm_end(previous)
                row["sm_active"] = metrics.value.get("sm_active") if metrics.ok else None
            self.gpm[index] = self.nvml.gpm_begin(index)
            rows.append(row)
        return rows, None

    def close(self) -> None:
        if self.nvml is not None:
            self.nvml.close()
            self.nvml = None
