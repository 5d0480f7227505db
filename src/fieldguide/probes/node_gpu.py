"""Is this machine fit to train: the GPUs' side, read through NVML with no process (node-check).
Who else holds them, clocks held down and why, memory errors, the PCIe link against the part's
own maximum, persistence mode and MIG; each count over every GPU, each GPU in the evidence."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from fieldguide.host.nvml import THROTTLING, NvmlUnavailable, nvml_session, reason_names
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import Probe, ProbeContext


def gpu_health(module: Any | None = None, own_pids: set[int] | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The values node-check judges and one row per GPU. `own_pids`: the job's processes, when a
    process is given (they are not "others"); with --local every process on a GPU is another's.
    NvmlUnavailable where NVML cannot be used."""
    own = own_pids or set()
    rows = []
    with nvml_session(module) as nvml:
        for index in range(nvml.count()):
            state, health = nvml.device(index), nvml.health(index)
            others = {pid: used for pid, used in nvml.compute_pids(index).items() if pid not in own}
            held = [r for r in reason_names(state["clock_event_reasons"]) if r in THROTTLING]
            # An idle link drops its generation to save power: the slot's maximum against the GPU's
            # own is what a training job will get, and the lanes do not drop at idle.
            gen, gen_max, gpu_gen_max = health["pcie_gen"], health["pcie_gen_max"], health["pcie_gen_gpu_max"]
            width, width_max = health["pcie_width"], health["pcie_width_max"]
            link_short = []
            if gen_max is not None and gpu_gen_max is not None and gen_max < gpu_gen_max:
                link_short.append(f"the slot allows gen {gen_max} of the GPU's gen {gpu_gen_max}")
            if width is not None and width_max is not None and width < width_max:
                link_short.append(f"x{width} of x{width_max} lanes")
            errors = []
            if health["ecc_uncorrected"]:
                errors.append(f"{health['ecc_uncorrected']} uncorrected ECC errors since the driver loaded")
            if health["retired_pages_pending"]:
                errors.append("retired pages pending a reset")
            if health["remap_failed"]:
                errors.append("a row remapping failed")
            elif health["remap_pending"]:
                errors.append("row remapping pending a reset")
            rows.append({"gpu": index, "name": state["name"], "others": len(others),
                         "others_memory_mb": round(sum(u or 0 for u in others.values()) / 2**20),
                         "clocks_held_by": ", ".join(held), "errors": "; ".join(errors),
                         "pcie": f"gen {gen} (max {gen_max}) x{width}" if width is not None else "n/a",
                         "pcie_short": "; ".join(link_short),
                         "persistence": {1: "on", 0: "off"}.get(health["persistence_mode"], "n/a"),
                         "mig": {1: "on", 0: "off"}.get(health["mig_mode"], "n/a"),
                         "unsupported": "; ".join(f"{k}: {v}" for k, v in {**state["unsupported"], **health["unsupported"]}.items())})
    values = {
        "gpus": len(rows),
        "gpus_with_others": sum(1 for r in rows if r["others"]),
        "others_memory_mb": sum(r["others_memory_mb"] for r in rows),
        "gpus_clocks_held": sum(1 for r in rows if r["clocks_held_by"]),
        "clocks_held_by": ", ".join(sorted({x for r in rows for x in r["clocks_held_by"].split(", ") if x})) or "none",
        "gpus_with_errors": sum(1 for r in rows if r["errors"]),
        "gpu_errors": "; ".join(f"GPU {r['gpu']}: {r['errors']}" for r in rows if r["errors"]) or "none",
        "gpus_pcie_short": sum(1 for r in rows if r["pcie_short"]),
        "pcie_short": "; ".join(f"GPU {r['gpu']}: {r['pcie_short']}" for r in rows if r["pcie_short"]) or "none",
        "gpus_persistence_off": sum(1 for r in rows if r["persistence"] == "off"),
        "gpus_mig": sum(1 for r in rows if r["mig"] == "on"),
    }
    return values, rows


def nvidia_present(dev: Path = Path("/dev"), which: Any = shutil.which) -> str:
    """What says this machine should have NVIDIA GPUs (device nodes, nvidia-smi), or ""."""
    nodes = sorted(p.name for p in dev.glob("nvidia[0-9]*"))
    found = [f"/dev/{', /dev/'.join(nodes[:2])}" + (" …" if len(nodes) > 2 else "")] if nodes else []
    if which("nvidia-smi"):
        found.append("nvidia-smi")
    return ", ".join(found)


@register
class NodeGpus(Probe):
    id = "node.gpus"
    evidence_kinds = (ev.TABLE,)
    title = "Every GPU's fitness through NVML: other processes, clocks held down, memory errors, PCIe, persistence, MIG"
    # No NEEDS_GPU: on a machine with NVIDIA devices, NVML failing is a finding (the check is
    # incomplete), not a node that does not apply. `nvidia_present` says which machine this is.
    params = {}
    values = {"gpus": "", "gpus_with_others": "", "others_memory_mb": "MB", "gpus_clocks_held": "",
              "clocks_held_by": "", "gpus_with_errors": "", "gpu_errors": "", "gpus_pcie_short": "",
              "pcie_short": "", "gpus_persistence_off": "", "gpus_mig": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        from fieldguide.probes.gpu import job_processes

        started = time.monotonic()
        own, _ = job_processes(ctx.target.pid)
        try:
            values, rows = gpu_health(own_pids=own)
        except NvmlUnavailable as err:
            present = nvidia_present()
            if present:  # a broken driver reads as no GPU: that is not a node fit to train
                return self.cannot(f"{err}, although this machine has NVIDIA devices ({present}): the GPUs "
                                   "were not checked", seconds=time.monotonic() - started, provenance="NVML")
            return self.cannot(f"no NVIDIA GPU here (no /dev/nvidia*, no nvidia-smi; NVML: {err})", applicable=False,
                               seconds=time.monotonic() - started, provenance="NVML")
        return self.measurement(values=values, evidence={"table": rows}, seconds=time.monotonic() - started,
                                provenance="NVML (nvidia-ml-py): devices, compute processes, clock event reasons, "
                                           "ECC, retired pages, remapped rows, PCIe link, persistence, MIG")
