"""Habits of a command-line tool: `diagnose --help` with examples, the exit status, the
environment and each playbook's budget; shell completion that completes commands, options,
playbook ids and cause ids."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fieldguide.frontends.cli import main
from fieldguide.playbook import list_playbooks
from fieldguide.walk.session import DEFAULT_BUDGET


def test_diagnose_help_has_examples_exit_status_environment_and_each_budget(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["diagnose", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "fieldguide diagnose --playbook node-check --local" in text
    assert "exit status:" in text and "130  interrupted" in text
    assert "FIELDGUIDE_PLAYBOOKS" in text and "FIELDGUIDE_DEMO_PYTHON" in text
    for playbook in list_playbooks([]):
        assert f"  {playbook.id:<22} {playbook.budget or DEFAULT_BUDGET:.0f} s" in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
@pytest.mark.parametrize(("words", "want", "not_want"), [
    (["fieldguide", "dia"], {"diagnose"}, {"demo"}),
    (["fieldguide", "diagnose", "--j"], {"--json"}, set()),
    (["fieldguide", "diagnose", "--playbook", "slow-"], {"slow-training", "slow-start"}, {"oom"}),
    (["fieldguide", "explain", "input.w"], {"input.waiting", "input.worker_startup"}, set()),
    (["fieldguide", "diagnose", "--", "python", "--j"], set(), {"--json"}),  # the launched command's own
])
def test_bash_completion(tmp_path: Path, words: list[str], want: set[str], not_want: set[str]) -> None:
    # `fieldguide` on PATH as the script expects: this interpreter's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "fieldguide"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m fieldguide \"$@\"\n")
    shim.chmod(0o755)
    quoted = " ".join(f"'{w}'" for w in words)
    run = (f'eval "$(fieldguide completion bash)"; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; '
           '_fieldguide; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    got = set(done.stdout.split())
    assert want <= got and not (not_want & got), got


def test_zsh_and_fish_scripts_name_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("zsh", "fish"):
        assert main(["completion", shell]) == 0
        text = capsys.readouterr().out
        assert all(name in text for name in ("diagnose", "report", "explain", "playbook", "json"))


def test_an_unknown_shell_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["completion", "tcsh"])
    assert done.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_memory_history_needs_a_launched_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--playbook", "oom", "--memory-history", "--pid", str(os.getpid())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-history" in err[0] and "launched command" in err[0]


def test_memory_history_arms_the_memory_capability_with_history_beside_the_playbooks(tmp_path: Path) -> None:
    """The launched job's agent is asked for `memory:history` (the agent joins it with the
    playbook's `memory`); the job prints what it was asked to arm."""
    from tests.conftest import run_fieldguide

    job = tmp_path / "job.py"
    job.write_text("import os; print('armed=' + os.environ.get('FIELDGUIDE_AGENT_ARM', ''))\n")
    proc = run_fieldguide("diagnose", "--playbook", "oom", "--memory-history", "--show-output", "--budget", "5",
                          "--", sys.executable, str(job))
    armed = [ln for ln in proc.stderr.splitlines() if "armed=" in ln]
    assert armed and armed[0].split("armed=")[1].split(",") == ["memory", "memory:history"], proc.stderr


def test_launch_arm_keeps_each_capability_once() -> None:
    from fieldguide.playbook import find_playbook
    from fieldguide.walk.session import launch_arm

    oom = find_playbook("oom")
    assert launch_arm(oom) == oom.arm
    assert launch_arm(oom, ("memory:history", "memory:history")) == (*oom.arm, "memory:history")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
@pytest.mark.parametrize("words", [["fieldguide", "diagnose", "--playbook", ""], ["fieldguide", "explain", ""],
                                   ["fieldguide", "diagnose", "--pid", ""]])
def test_completion_never_expands_what_it_completes(tmp_path: Path, words: list[str]) -> None:
    """Issue 33 H3: `compgen -W "$(fieldguide playbooks)"` ran `$(touch${IFS}PWNED)` in a playbook id
    when Tab was pressed. A `fieldguide` that prints hostile ids: none is offered, nothing runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = main_script(tmp_path)
    shim = bin_dir / "fieldguide"
    shim.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = completion ]; then exec " + sys.executable + " -m fieldguide \"$@\"; fi\n"
                    "printf '%s\\n' 'x$(touch${IFS}PWNED) a hostile one' '`touch PWNED2`' 'good-id  fine' "
                    "'$(touch PWNED3)'\n")
    shim.chmod(0o755)
    quoted = " ".join(f"'{w}'" for w in words)
    run = (f'cd {script}; eval "$(fieldguide completion bash)"; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; '
           '_fieldguide; printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert not any(p.name.startswith("PWNED") for p in script.iterdir())
    if words[-2] != "--pid":
        assert set(done.stdout.split()) == {"good-id"}


def main_script(tmp_path: Path) -> Path:
    where = tmp_path / "cwd"
    where.mkdir()
    return where


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_pid_completion_does_not_need_user(tmp_path: Path) -> None:
    """Root in a container often has no $USER: the pids are still the caller's python processes."""
    run = ('eval "$(' + sys.executable + ' -m fieldguide completion bash)"; COMP_WORDS=(fieldguide diagnose --pid ""); '
           'COMP_CWORD=3; _fieldguide; printf "%s\\n" "${COMPREPLY[@]}"')
    env = {k: v for k, v in os.environ.items() if k != "USER"}
    done = subprocess.run(["bash", "-c", run], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert all(word.isdigit() for word in done.stdout.split()), done.stdout
