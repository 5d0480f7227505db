"""The environment: Python, torch and CUDA versions of the target, CPU cores, GPUs."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path
from typing import Any

import psutil

from fieldguide.host.nvml import NvmlUnavailable, nvml_devices
from fieldguide.measurement import Measurement
from fieldguide.probes import evidence as ev
from fieldguide.probes import register
from fieldguide.probes.base import Probe, ProbeContext

_VERSION = re.compile(r"^(__version__|cuda)\s*(?::\s*\S+)?\s*=\s*['\"]?([^'\"\n]*)['\"]?", re.M)


TORCH_MARKS = ("/torch/lib/libtorch", "/torch/_C")


def torch_library_in_maps(pid: int) -> str | None:
    """The path of torch's native library mapped by a process (it imported torch), or None."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                if any(mark in line for mark in TORCH_MARKS):
                    return line.split(None, 5)[-1].strip()
    except OSError:
        pass
    return None


def torch_version_from_maps(pid: int) -> dict[str, Any]:
    """torch's version in another process, without touching it: find the libtorch it mapped,
    then read the torch/version.py beside it."""
    path = torch_library_in_maps(pid)
    if path is None:
        return {}
    try:
        version_file = Path(path.split("/torch/")[0]) / "torch" / "version.py"
        return parse_torch_version_file(version_file.read_text())
    except OSError:
        return {}


def parse_torch_version_file(text: str) -> dict[str, Any]:
    found = {k: v for k, v in _VERSION.findall(text)}
    cuda = found.get("cuda")
    return {"torch": found.get("__version__"), "cuda": None if cuda in (None, "None", "") else cuda}


def python_version_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                m = re.search(r"libpython(\d+\.\d+)", line)
                if m:
                    return m.group(1)
        exe = os.path.basename(psutil.Process(pid).exe())
        m = re.search(r"python(\d+\.\d+)", exe)
        return m.group(1) if m else None
    except (OSError, psutil.Error):
        return None


@register
class Environment(Probe):
    id = "env.versions"
    evidence_kinds = (ev.GPUS,)
    title = "Python, torch and CUDA versions of the target; CPU cores; GPUs through NVML"
    reads_history = True  # the agent said its versions at hello: a job that died young still has them
    params = {}
    values = {"python": "", "torch": "", "cuda": "", "cpu_cores": "", "gpu_count": "", "nvml": ""}

    def run(self, ctx: ProbeContext) -> Measurement:
        started = time.monotonic()
        values: dict[str, Any] = {"python": None, "torch": None, "cuda": None,
                                  "cpu_cores": psutil.cpu_count(), "gpu_count": 0}
        agent = ctx.target.agent
        conn = agent.primary() if agent else None
        sources = []
        if conn is not None:
            values["python"] = conn.hello.get("python")
            values["torch"] = conn.torch.get("torch")
            values["cuda"] = conn.torch.get("cuda")
            sources.append("agent")
        elif ctx.target.pid is not None:
            values.update({k: v for k, v in torch_version_from_maps(ctx.target.pid).items() if v})
            values["python"] = python_version_of(ctx.target.pid)
            sources.append("/proc/PID/maps")
        else:
            values["python"] = platform.python_version()
            try:
                import importlib.metadata

                values["torch"] = importlib.metadata.version("torch")
            except importlib.metadata.PackageNotFoundError:
                pass
            sources.append("this interpreter")
        gpus: list[dict[str, Any]] = []
        try:
            gpus = nvml_devices()
            values["nvml"] = "ok"
        except NvmlUnavailable as err:
            values["nvml"] = str(err)  # a reading, not a crash
        values["gpu_count"] = len(gpus)
        sources.append("NVML")
        return self.measurement(values=values, evidence={"gpus": gpus}, seconds=time.monotonic() - started,
                                provenance=", ".join(sources))
