"""Every zoo workload declares what a diagnosis must find, and the declaration is read without importing it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fieldguide import workloads
from fieldguide.playbook import find_playbook, load_causes, playbook_dirs

DECLARED = workloads.declarations()


def test_every_script_declares_itself() -> None:
    scripts = {p.stem for p in workloads.path(workloads.DEMO).parent.glob("*.py") if not p.name.startswith("_")}
    assert set(DECLARED) == scripts
    with pytest.raises(KeyError, match="unknown workload 'nope'"):
        workloads.path("nope")
    assert len(DECLARED) >= 13


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declaration_names_a_playbook_and_a_cause_it_can_reach(name: str) -> None:
    d = DECLARED[name]
    playbook = find_playbook(d.playbook)
    if d.cause is None and d.verdict == "inconclusive":
        assert d.conclusion is None, f"{name}: an inconclusive walk reaches no leaf"
        return
    if d.cause is None:
        assert d.conclusion in playbook.leaves, f"{name}: {d.conclusion} is not a healthy leaf of {d.playbook}"
        return
    assert d.cause in load_causes(playbook_dirs()[-1]), f"{name}: unknown cause {d.cause}"
    reachable = {edge.target for node in playbook.nodes.values() for edge in (node.on_pass, node.on_depart)
                 if edge.kind == "cause"}
    assert d.cause in reachable, f"{name}: no node of {d.playbook} departs with {d.cause}"


def test_reading_declarations_never_imports_torch() -> None:
    code = ("import json, sys; from fieldguide import workloads; d = workloads.declarations(); "
            "print(json.dumps({'torch': 'torch' in sys.modules, 'n': len(d)}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"torch": False, "n": len(DECLARED)}


@pytest.mark.parametrize(("source", "needle"), [
    ("import torch\n", "no FIELDGUIDE declaration"),
    ("FIELDGUIDE = dict(playbook='x')\n", "literal dict"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'input.waiting', 'modes': ['remote']}\n", "modes"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'input.waiting', 'modes': []}\n", "modes"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': None, 'modes': ['launch']}\n", "conclusion"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'waiting', 'modes': ['launch']}\n", "cause id"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'input.waiting', 'modes': ['launch'], 'x': 1}\n",
     "unknown FIELDGUIDE keys"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'a.b', 'modes': ['launch'], 'python_args': '-m x'}\n",
     "python_args"),
    ("FIELDGUIDE = {'playbook': 'slow-training', 'cause': 'a.b', 'modes': ['launch'], 'python_args': ['-m', '']}\n",
     "python_args"),
])
def test_malformed_declarations_say_what_is_wrong(source: str, needle: str) -> None:
    with pytest.raises(workloads.BadDeclaration, match=needle) as info:
        workloads.read_declaration(source, "bad_workload.py")
    assert str(info.value).startswith("bad_workload.py: ")


def test_a_declaration_is_read_without_running_the_script() -> None:
    source = "raise SystemExit('never run')\nFIELDGUIDE = {'playbook': 'p', 'cause': 'a.b', 'modes': ['attach']}\n"
    d = workloads.read_declaration(source, "w.py")
    assert (d.playbook, d.cause, d.modes) == ("p", "a.b", ("attach",))


def test_python_args_run_a_workload_under_its_launcher() -> None:
    source = ("FIELDGUIDE = {'playbook': 'p', 'cause': 'dist.straggler', 'modes': ['launch'],\n"
              "              'python_args': ['-m', 'torch.distributed.run', '--nproc-per-node', '2']}\n")
    d = workloads.read_declaration(source, "w.py")
    assert d.python_args == ("-m", "torch.distributed.run", "--nproc-per-node", "2")
    assert workloads.read_declaration("FIELDGUIDE = {'playbook': 'p', 'cause': 'a.b', 'modes': ['attach']}\n",
                                      "w.py").python_args == ()
    # A plain workload runs as `python script`; a torchrun one with the launcher before the script.
    assert workloads.command(workloads.DEMO, "py") == ["py", str(workloads.path(workloads.DEMO))]
    for name in ("ddp_straggler_input", "ddp_comm_bound", "ddp_healthy"):
        assert workloads.command(name, "py") == ["py", "-m", "torch.distributed.run", "--nproc-per-node", "2",
                                                 str(workloads.path(name))]
