"""node-check: is this machine fit to train, with no process. The host probes on constructed
/sys and /proc files, the GPU probe on constructed NVML readings, and the walk's order."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.probes.node_gpu import gpu_health
from fieldguide.probes.node_host import NodeCpuFreq, cgroup_cpus
from fieldguide.walk.engine import Walk
from tests.unit.nvml_fake import FakeGpu, fake_pynvml


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota_in_the_process_own_group(tmp_path: Path) -> None:
    write(tmp_path / "proc-cgroup", "0::/job.slice/task-7\n")
    write(tmp_path / "cg" / "job.slice" / "task-7" / "cpu.max", "400000 100000\n")
    assert cgroup_cpus(tmp_path / "cg", tmp_path / "proc-cgroup") == (4.0, str(tmp_path / "cg/job.slice/task-7/cpu.max"))
    write(tmp_path / "cg" / "job.slice" / "task-7" / "cpu.max", "max 100000\n")
    assert cgroup_cpus(tmp_path / "cg", tmp_path / "proc-cgroup")[0] is None  # no quota


def test_cgroup_v1_quota_and_none_at_all(tmp_path: Path) -> None:
    write(tmp_path / "proc-cgroup", "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "150000\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpus(tmp_path / "cg", tmp_path / "proc-cgroup")[0] == 1.5
    assert cgroup_cpus(tmp_path / "empty", tmp_path / "proc-cgroup") == (None, "no cgroup CPU controller found")


def test_the_governor_is_read_and_its_absence_is_not_judged(tmp_path: Path) -> None:
    ctx = SimpleNamespace(target=SimpleNamespace(pid=None))
    for cpu, governor in (("cpu0", "performance"), ("cpu1", "powersave")):
        write(tmp_path / cpu / "cpufreq" / "scaling_governor", governor + "\n")
    found = NodeCpuFreq().run(ctx, root=str(tmp_path))  # type: ignore[arg-type]
    assert found.values == {"cpu_governor": "performance, powersave", "governor_powersave": True}
    none = NodeCpuFreq().run(ctx, root=str(tmp_path / "nothing"))  # type: ignore[arg-type]
    assert not none.ok and not none.applicable and "no cpufreq governor" in (none.unavailable or "")


def test_a_healthy_gpu_is_all_zeros() -> None:
    values, rows = gpu_health(fake_pynvml([FakeGpu(), FakeGpu(uuid="GPU-b")]))
    assert values["gpus"] == 2 and values["gpus_with_errors"] == values["gpus_with_others"] == 0
    assert values["gpus_clocks_held"] == values["gpus_pcie_short"] == values["gpus_mig"] == values["gpus_persistence_off"] == 0
    assert rows[0]["pcie"] == "gen 5 (max 5) x16" and rows[0]["persistence"] == "on"


def test_what_makes_a_gpu_unfit_is_counted_and_named() -> None:
    gpus = [FakeGpu(ecc_uncorrected=3, remapped_rows=(0, 1, 1, 0), processes={77: 40 * 2**30}),
            FakeGpu(uuid="GPU-b", reasons=0x4 | 0x1, pcie=(1, 4, 5, 8, 16), persistence=0, mig=(1, 1))]
    values, rows = gpu_health(fake_pynvml(gpus))
    assert values["gpus_with_errors"] == 1
    assert values["gpu_errors"] == "GPU 0: 3 uncorrected ECC errors since the driver loaded; row remapping pending a reset"
    assert values["gpus_with_others"] == 1 and values["others_memory_mb"] == 40 * 1024
    assert values["gpus_clocks_held"] == 1 and values["clocks_held_by"] == "sw_power_cap"  # idle is no limit
    assert values["pcie_short"] == "GPU 1: the slot allows gen 4 of the GPU's gen 5; x8 of x16 lanes"
    assert values["gpus_persistence_off"] == 1 and values["gpus_mig"] == 1
    # A job's own processes are not "others" when a process is given.
    assert gpu_health(fake_pynvml(gpus), own_pids={77})[0]["gpus_with_others"] == 0


def test_an_idle_links_lower_generation_is_not_a_short_link() -> None:
    values, _ = gpu_health(fake_pynvml([FakeGpu(pcie=(1, 5, 5, 16, 16))]))  # gen 1 at idle, max 5
    assert values["gpus_pcie_short"] == 0


def test_a_reading_the_device_cannot_give_is_not_a_fault() -> None:
    values, rows = gpu_health(fake_pynvml([FakeGpu(unsupported={"ecc", "remapped", "mig", "persistence"})]))
    assert values["gpus_with_errors"] == 0 and values["gpus_mig"] == 0 and values["gpus_persistence_off"] == 0
    assert "ecc_uncorrected: Not Supported" in rows[0]["unsupported"]


HOST_FIT = {"node.cpus": {"cpu_limit_fraction": 1.0, "usable_cpus": 2, "cpu_count": 2, "cgroup_cpus": None},
            "node.shm": {"shm_mb": 24000, "shm_free_mb": 24000},
            "node.memory": {"memory_available_fraction": 0.8, "memory_available_mb": 19000, "memory_total_mb": 24000,
                            "swap_used_mb": 0},
            "node.files": {"nofile_soft": 20000, "nofile_hard": 20000, "nofile_unlimited": False},
            "node.cpufreq": {"governor_powersave": False, "cpu_governor": "performance"},
            "node.calibration": {"calibrated": True, "calibrated_at": "2026-12-06"}}


def walk(readings: dict[str, dict[str, Any]], gpu: bool) -> Walk:
    def measure(option: Any) -> Measurement:
        if option.probe == "node.gpus" and not gpu:
            return Measurement.cannot(option.probe, "needs an NVIDIA GPU", applicable=False)
        return Measurement(probe=option.probe, values=readings[option.probe])

    found = Walk(find_playbook("node-check"), lambda: {"gpu"} if gpu else set(), measure)
    found.run()
    return found


def test_without_a_gpu_the_host_nodes_decide() -> None:
    from fieldguide.report.findings import findings_from_walk

    fit = walk(HOST_FIT, gpu=False)
    assert fit.verdict == "clean" and fit.conclusion == "node.fit"
    assert [r.status for r in fit.path[:6]] == ["skip"] * 6 and "node.gpu" in fit.caveat
    # The clean verdict says what it does not cover: no word that the GPUs are healthy.
    text = findings_from_walk(fit, {"kind": "local"}, {}).conclusion_text
    assert "Not measured, so not covered: node.gpu-errors, node.gpu-others" in text, text
    assert "needs an NVIDIA GPU" in text and "no memory errors" not in text.split("Not measured")[0].split(":")[0]


def test_nvml_failing_where_nvidia_devices_exist_is_no_fit_node(tmp_path: Path, monkeypatch) -> None:
    """A broken driver reads as no GPU through NVML; /dev/nvidia* or nvidia-smi say otherwise, and
    then the GPU nodes could not measure (an inconclusive walk, exit 3), not "not applicable"."""
    from fieldguide.host.nvml import NvmlUnavailable
    from fieldguide.probes import node_gpu

    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    assert node_gpu.nvidia_present(tmp_path, lambda name: None) == "/dev/nvidia0"
    assert node_gpu.nvidia_present(tmp_path / "none", lambda name: "/usr/bin/nvidia-smi") == "nvidia-smi"
    assert node_gpu.nvidia_present(tmp_path / "none", lambda name: None) == ""

    def no_nvml(**kwargs: Any) -> Any:
        raise NvmlUnavailable("NVML unavailable: Driver Not Loaded")

    monkeypatch.setattr(node_gpu, "gpu_health", no_nvml)
    ctx = SimpleNamespace(target=SimpleNamespace(pid=None))
    monkeypatch.setattr(node_gpu, "nvidia_present", lambda: "/dev/nvidia0")
    broken = node_gpu.NodeGpus().run(ctx)  # type: ignore[arg-type]
    assert not broken.ok and broken.applicable and "the GPUs were not checked" in broken.unavailable
    monkeypatch.setattr(node_gpu, "nvidia_present", lambda: "")
    absent = node_gpu.NodeGpus().run(ctx)  # type: ignore[arg-type]
    assert not absent.ok and not absent.applicable and "no NVIDIA GPU here" in absent.unavailable

    def measure(option: Any) -> Measurement:
        if option.probe == "node.gpus":
            return broken
        return Measurement(probe=option.probe, values=HOST_FIT[option.probe])

    found = Walk(find_playbook("node-check"), lambda: set(), measure)
    found.run()
    assert found.verdict == "inconclusive" and "node.gpu" in found.caveat
    small_shm = walk({**HOST_FIT, "node.shm": {"shm_mb": 64, "shm_free_mb": 60}}, gpu=False)
    assert small_shm.departure is not None and small_shm.departure.cause.id == "node.shm_small"
    assert "64 MB" in small_shm.departure.summary


@pytest.mark.parametrize(("gpu_values", "cause"), [
    ({"gpus_with_errors": 1, "gpu_errors": "GPU 0: 3 uncorrected ECC errors"}, "node.gpu_errors"),
    ({"gpus_with_others": 2, "others_memory_mb": 81920}, "node.gpu_shared"),
    ({"gpus_pcie_short": 1, "pcie_short": "GPU 3: x8 of x16 lanes"}, "node.pcie_degraded"),
])
def test_on_a_gpu_node_the_gpus_come_first(gpu_values: dict[str, Any], cause: str) -> None:
    healthy = {"gpus": 8, "gpus_with_errors": 0, "gpus_with_others": 0, "others_memory_mb": 0, "gpus_clocks_held": 0,
               "clocks_held_by": "none", "gpu_errors": "none", "gpus_pcie_short": 0, "pcie_short": "none",
               "gpus_persistence_off": 0, "gpus_mig": 0}
    # The host is unfit too (a 64 MB /dev/shm): the GPU's fault is named first.
    found = walk({**HOST_FIT, "node.shm": {"shm_mb": 64, "shm_free_mb": 60}, "node.gpus": {**healthy, **gpu_values}},
                 gpu=True)
    assert found.departure is not None and found.departure.cause.id == cause


def test_local_with_a_playbook_that_needs_a_process_names_the_one_that_does(capsys: pytest.CaptureFixture[str]) -> None:
    from fieldguide.frontends.cli import main

    assert main(["diagnose", "--playbook", "slow-training", "--local"]) == 2
    err = capsys.readouterr().err
    assert "--playbook node-check" in err and len(err.strip().splitlines()) == 1


def test_plugin_probes_are_read_only_for_an_id_that_is_not_bundled(monkeypatch: pytest.MonkeyPatch) -> None:
    import fieldguide.probes as probes_module
    from fieldguide.probes import Registry
    from fieldguide.probes.base import Probe

    fresh = Registry()

    class PluginProbe(Probe):
        id = "plugin.extra"

    scans: list[str] = []

    def entry_points(group: str) -> list[Any]:
        scans.append(group)
        return [SimpleNamespace(load=lambda: fresh.register(PluginProbe))]

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(probes_module, "builtin_modules", lambda: [])
    fresh.register(NodeCpuFreq)
    assert fresh.get("node.cpufreq") is NodeCpuFreq and scans == []  # a bundled id: no scan
    assert fresh.get("plugin.extra") is PluginProbe and scans == ["fieldguide.probes"]
    assert "plugin.extra" in fresh.ids() and scans == ["fieldguide.probes"]  # scanned once
