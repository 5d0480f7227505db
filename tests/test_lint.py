"""ruff, mypy and the import-layer contracts are part of the tests, so CI keeps the code as typed,
as clean and as layered as it is now."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None and subprocess.run([sys.executable, "-m", name, "--version"],
                                                     capture_output=True).returncode != 0:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


def _lint_imports() -> list[str]:
    beside = Path(sys.executable).with_name("lint-imports")
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    return [found, "--no-cache"]


def test_ruff_is_clean() -> None:
    done = subprocess.run([*_tool("ruff"), "check", "src", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_mypy_is_clean_on_src() -> None:  # ~40 s without a cache (CI's case)
    # The configuration is pyproject.toml's [tool.mypy]: strict on the core, defaults elsewhere.
    done = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_import_layers_hold() -> None:
    """pyproject.toml's [tool.importlinter] contracts: one layering of the whole package (front
    ends, the walk, the probes, the targets, the foundations: nothing imports upwards), the core
    never imports Textual or the TUI, the CLI never imports torch (directly or through anything it
    imports, function-level included)."""
    done = subprocess.run(_lint_imports(), cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "broken" in done.stdout and " 0 broken" in done.stdout


CANARY = """
[tool.importlinter]
root_packages = ["fieldguide"]
include_external_packages = true

[[tool.importlinter.contracts]]
name = "canary: a workload imports torch"
type = "forbidden"
source_modules = ["fieldguide.workloads.healthy_mlp"]
forbidden_modules = ["torch"]
"""


def test_import_linter_sees_third_party_imports(tmp_path: Path) -> None:
    """The contracts could pass by seeing nothing: a contract that must break does break."""
    config = tmp_path / "canary.toml"
    config.write_text(CANARY)
    done = subprocess.run([*_lint_imports(), "--config", str(config)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "fieldguide.workloads.healthy_mlp -> torch" in done.stdout


def test_no_module_imports_itself_through_others() -> None:
    """No import circles between modules (function-level imports included; imports made only
    for type checking are not circles at run time)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("fieldguide", exclude_type_checking_imports=True)
    circles = set()
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                back = graph.find_shortest_chain(importer=imported, imported=module) or ()
                circles.add(" -> ".join((module, *back)))
    assert not circles, "\n".join(sorted(circles))


def test_the_agent_inside_the_job_imports_only_the_standard_library() -> None:
    """agent/inside runs in the job's interpreter, loaded by file path: it may import the standard
    library and itself (relatively), and torch, the job's own, only inside functions that run once
    the job has it."""
    import ast

    inside = ROOT / "src" / "fieldguide" / "agent" / "inside"
    found = []
    for path in sorted(inside.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # relative: the agent itself
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                root = name.split(".")[0]
                if root in sys.stdlib_module_names or root == "__future__":
                    continue
                if root == "torch" and id(node) not in top_level:
                    continue
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not found, "\n".join(found)
