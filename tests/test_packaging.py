"""The wheel ships the playbooks; the core never imports Textual; the CLI never imports torch."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT


def imported_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("module", ["fieldguide.playbook", "fieldguide.walk.engine", "fieldguide.probes",
                                    "fieldguide.report", "fieldguide.walk.session", "fieldguide.targets",
                                    "fieldguide.report.summary"])
def test_core_never_imports_textual(module: str) -> None:
    modules = imported_after(f"import {module}; from fieldguide.probes import registry; registry.ids()")
    assert "textual" not in modules
    assert "torch" not in modules  # probes import torch only inside the target, never here
    assert "pynvml" not in modules


def test_cli_help_is_light() -> None:
    # How fast `--help` is depends on the machine: benchmarks/cli_startup.py times it. What
    # makes it fast is tested here: the CLI module loads nothing heavy.
    modules = imported_after("import fieldguide.frontends.cli")
    assert not {"torch", "textual", "pynvml", "psutil", "rich"} & modules
    done = subprocess.run([sys.executable, "-m", "fieldguide", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "usage: fieldguide" in done.stdout


@pytest.mark.integration
def test_wheel_ships_playbooks(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
                   check=True, capture_output=True)
    wheel = next(dist.glob("fieldguide-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # Dependencies come from this test environment (a .pth to its site-packages), the package
    # itself only from the wheel: no network, no torch download.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # Every site directory this interpreter sees (a --system-site-packages venv finds some
    # dependencies in the base interpreter's).
    deps = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    Path(site, "deps.pth").write_text("\n".join([sysconfig.get_paths()["purelib"], *deps]) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True)
    out = subprocess.run([str(env_dir / "bin" / "fieldguide"), "playbooks"], capture_output=True, text=True,
                         cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert "slow-training" in out.stdout
    where = subprocess.run([str(python), "-c", "import fieldguide; print(fieldguide.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path).stdout
    assert str(env_dir) in where, f"fieldguide imported from {where}, not the wheel"
    from zipfile import ZipFile

    names = ZipFile(wheel).namelist()
    assert "fieldguide/_playbooks/slow-training.yaml" in names
    assert "fieldguide/_playbooks/causes.yaml" in names
    assert any(n.startswith("fieldguide/workloads/") and n.endswith(".py") for n in names)


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_torch_is_an_extra_not_a_dependency() -> None:
    """fieldguide's process never imports torch (the agent runs in the job's interpreter)."""
    project = _pyproject()["project"]
    names = [dep.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
             for dep in project["dependencies"]]
    assert "torch" not in names
    extras = project["optional-dependencies"]
    assert any(dep.startswith("torch") for dep in extras["demo"])
    assert any(dep.startswith("torch") for dep in extras["test"])  # the zoo's workloads need it
    assert any(dep.startswith("import-linter") for dep in extras["test"])


def test_makefile_installs_torch_before_the_extras() -> None:
    """pip must never resolve a bare `torch` requirement itself (it could pick a CUDA build): the
    venv recipe reuses an installed torch, else pins torch==2.13.0, before installing the extras."""
    commands = [line.strip() for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith("\t")]
    torch_line = next(i for i, line in enumerate(commands) if "pip install -q torch==2.13.0" in line)
    extras_line = next(i for i, line in enumerate(commands) if 'pip install -q -e ".[test,demo]"' in line)
    assert torch_line < extras_line
    assert '-c "import torch" 2>/dev/null || ' in commands[torch_line]
