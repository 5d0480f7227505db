"""The workload zoo: small, self-contained CPU training scripts for exercising
`fieldguide`.

Each script trains a tiny model for ``FIELDGUIDE_WORKLOAD_SECONDS`` seconds
(default 120), prints ``step N loss X`` progress lines, and has exactly one
known performance problem, or none. ``WORKLOADS`` maps each script's stem to
the cause id a diagnosis should name ("" means healthy). The scripts import
only the standard library and torch, so they can be run with
``python <path(name)>`` anywhere torch is installed.
"""
import importlib.resources
import pathlib

WORKLOADS = {
    "healthy_mlp": "",
    "healthy_convnet": "",
    "debug_profiler": "host.debug_mode",
    "debug_anomaly_ctx": "host.debug_mode",
    "loader_remote_reads": "input.waiting",
    "loader_slow_workers": "input.waiting",
    "loader_decode_cpu": "input.cpu_bound",
    "loader_augment_workers": "input.cpu_bound",
    "worker_restart_epochs": "input.worker_startup",
    "checkpoint_every_step": "host.blocking_io",
    "log_writes_every_step": "host.blocking_io",
    "tiny_ops_loop": "host.overhead_bound",
    "tiny_ops_elementwise": "host.overhead_bound",
}

DEMO = "loader_remote_reads"


def path(name: str) -> pathlib.Path:
    """Filesystem path of the workload script called ``name`` (its stem)."""
    if name not in WORKLOADS:
        known = ", ".join(sorted(WORKLOADS))
        raise KeyError(f"unknown workload {name!r}; known: {known}")
    resource = importlib.resources.files(__package__).joinpath(f"{name}.py")
    return pathlib.Path(str(resource))
