"""Playbooks from anyone: hostile or broken files are refused fast, on one line, naming the file.

What could hang (an alias bomb, an exponential cycle check) or crash the interpreter (deep
nesting) runs in a subprocess with a timeout, so that a regression fails instead of hanging.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fieldguide.errors import BadInput
from fieldguide.playbook import PlaybookError, find_playbook, list_playbooks, load_playbook
from fieldguide.playbook.loader import MAX_INCLUDE_DEPTH
from fieldguide.playbook.source import MAX_FILE_BYTES


@pytest.fixture(autouse=True)
def _no_user_playbook_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIELDGUIDE_PLAYBOOKS", raising=False)


def node(node_id: str, on_pass: str, depart: str = "{cause: input.waiting}", error: str | None = None) -> str:
    text = (f"  - id: {node_id}\n    question: Is {node_id} fine?\n    why: Because.\n    measure:\n"
            f"      - probe: loop.steps\n        expect: {{data_wait_fraction: {{below: 0.1}}}}\n"
            f"    pass: {on_pass}\n    depart: {depart}\n")
    return text + (f"    error: {error}\n" if error else "")


def playbook(pb_id: str, nodes: list[str], start: str | None = None, extra: str = "") -> str:
    first = start or nodes[0].split("id: ", 1)[1].split("\n", 1)[0]
    return (f"id: {pb_id}\ntitle: {pb_id} title\npurpose: A test playbook, {pb_id}.\nstart: {first}\n"
            f"leaves:\n  t.ok: All fine.\n{extra}nodes:\n" + "".join(nodes))


GOOD = playbook("good", [node("a", "{leaf: t.ok}")])
LEAF = "{leaf: t.ok}"


def bomb(levels: int = 9, field: str = "leaves") -> str:
    """The billion laughs: each anchor is a list of nine aliases of the one before."""
    lines = [f"    - &l0 [{', '.join(['lol'] * 9)}]"]
    lines += [f"    - &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    body = "\n".join(lines)
    if field == "leaves":
        return GOOD.replace("leaves:\n  t.ok: All fine.\n", f"leaves:\n  t.ok: All fine.\n  t.lol:\n{body}\n")
    return GOOD.replace("title: good title\n", f"title:\n{body}\n")


def run_fieldguide(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (as tests/conftest.py's helper, which tests/unit cannot import)."""
    base = {k: v for k, v in os.environ.items() if k != "FIELDGUIDE_PLAYBOOKS"}
    full_env = {**base, "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    try:
        return subprocess.run([sys.executable, "-m", "fieldguide", *args], capture_output=True, text=True,
                              timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"fieldguide {' '.join(a[:40] for a in args)} did not finish within {timeout} s")


def run_python(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter; a hang or a crash fails the test, it does not take it down."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, env={k: v for k, v in os.environ.items() if k != "FIELDGUIDE_PLAYBOOKS"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not finish within {timeout} s")


def load_in_subprocess(path: Path, timeout: float = 30) -> str:
    """Load `path` in a subprocess: prints `ok SECONDS` or `error MESSAGE`."""
    proc = run_python(f"""
        import time
        from fieldguide.playbook import PlaybookError, load_playbook
        load_playbook({str(Path(__file__).resolve().parents[2] / 'playbooks' / 'slow-training.yaml')!r})  # warm
        started = time.perf_counter()
        try:
            load_playbook({str(path)!r})
        except PlaybookError as err:
            print("error", err)
        else:
            print("ok", time.perf_counter() - started)
    """, timeout)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout  # one line, whatever happened
    return lines[0]


def assert_one_line_error(proc: subprocess.CompletedProcess[str], status: int, *needles: str) -> None:
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# --- 1. aliases --------------------------------------------------------------------------------


def test_the_bundled_playbooks_use_no_anchors_or_aliases():
    """Why refusing aliases costs nothing: no bundled playbook needs one."""
    import yaml

    for path in (Path(__file__).resolve().parents[2] / "playbooks").glob("*.yaml"):
        events = yaml.parse(path.read_text(encoding="utf-8"))
        assert not any(isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None) for e in events), path


def test_an_alias_bomb_under_leaves_is_refused_fast_naming_file_and_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb())
    result = load_in_subprocess(path, timeout=20)
    assert result.startswith(f"error {path}:{line_of(bomb(), '*l0')}: bad YAML: alias *l0 is not allowed"), result


@pytest.mark.parametrize("field", ["leaves", "title"])
def test_an_alias_anywhere_is_refused(tmp_path, field):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(levels=3, field=field))
    with pytest.raises(PlaybookError, match=r"alias \*l0 is not allowed") as info:
        load_playbook(path)
    assert info.value.line == line_of(bomb(levels=3, field=field), "*l0")
    assert "\n" not in str(info.value)


def test_deep_nesting_is_refused_without_crashing_the_interpreter(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("id: [" + "[" * 200_000 + "\n")
    result = load_in_subprocess(path, timeout=30)
    assert result.startswith(f"error {path}:1: bad YAML: nested more than"), result


@pytest.mark.parametrize(("value", "needle"), [
    ("2020-13-45", "not a valid timestamp"),  # ValueError from datetime
    ("!!bool maybe", "not a valid bool"),  # KeyError in PyYAML
    ("1" * 5000, "a number longer than"),  # Python's int digit limit
    (":".join(["1"] * 200_000), "a number longer than"),  # sexagesimal: quadratic to build
], ids=["bad-date", "bad-bool", "long-int", "sexagesimal"])
def test_odd_scalars_are_one_line_yaml_errors_at_their_line(tmp_path, value, needle):
    text = GOOD.replace("title: good title", f"title: {value}")
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(PlaybookError, match=needle) as info:
        load_playbook(path)
    assert info.value.line == 2 and len(str(info.value)) < 400


# --- 2. the graph: cycles, long chains, includes ---------------------------------------------------


def test_a_ladder_of_forty_nodes_loads_in_well_under_a_second(tmp_path):
    """Every node leads to the next one twice (pass, error) and to one sink: a search that
    remembered only its path walked 2**40 paths."""
    nodes = [node(f"n{i}", f"n{i + 1}", depart="sink", error=f"n{i + 1}") for i in range(39)]
    nodes += [node("n39", "sink", error="sink"), node("sink", LEAF)]
    path = tmp_path / "ladder.yaml"
    path.write_text(playbook("ladder", nodes))
    result = load_in_subprocess(path, timeout=20)
    assert result.startswith("ok "), result
    assert float(result.split()[1]) < 1.0, result


def test_a_fibonacci_diamond_loads_fast(tmp_path):
    nodes = [node(f"n{i}", f"n{i + 1}", depart=f"n{i + 2}") for i in range(40)]
    nodes += [node("n40", LEAF), node("n41", LEAF)]
    path = tmp_path / "diamond.yaml"
    path.write_text(playbook("diamond", nodes))
    result = load_in_subprocess(path, timeout=20)
    assert result.startswith("ok ") and float(result.split()[1]) < 1.0, result


def test_a_thousand_node_chain_loads_without_recursion_error(tmp_path):
    nodes = [node(f"n{i}", f"n{i + 1}") for i in range(999)] + [node("n999", LEAF)]
    path = tmp_path / "chain.yaml"
    path.write_text(playbook("chain", nodes))
    assert len(load_playbook(path).nodes) == 1000


def test_a_cycle_is_one_line_naming_it(tmp_path):
    nodes = [node("s", "a"), node("a", "b"), node("b", "c", depart="a"), node("c", LEAF)]
    text = playbook("cyc", nodes)
    path = tmp_path / "cyc.yaml"
    path.write_text(text)
    with pytest.raises(PlaybookError) as info:
        load_playbook(path)
    assert str(info.value) == f"{path}:{line_of(text, '- id: a')}: node a: cycle: a -> b -> a"


def test_a_cycle_at_the_end_of_a_long_chain_is_named(tmp_path):
    nodes = [node(f"n{i}", f"n{i + 1}") for i in range(1999)] + [node("n1999", "n1998")]
    path = tmp_path / "long.yaml"
    path.write_text(playbook("long", nodes))
    with pytest.raises(PlaybookError, match=r"node n1998: cycle: n1998 -> n1999 -> n1998$"):
        load_playbook(path)


def including(pb_id: str, other: str, wanted: list[str], own: str) -> str:
    spec = f"include:\n  - playbook: {other}\n    nodes: [{', '.join(wanted)}]\n"
    return playbook(pb_id, [node(own, wanted[0])], extra=spec)


def test_playbooks_that_include_each_other_name_the_loop(tmp_path):
    (tmp_path / "pa.yaml").write_text(including("pa", "pb", ["b1"], "a1"))
    (tmp_path / "pb.yaml").write_text(including("pb", "pa", ["a1"], "b1"))
    with pytest.raises(PlaybookError) as info:
        load_playbook(tmp_path / "pa.yaml")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'pb.yaml'}:") and message.endswith("include loop: pa -> pb -> pa")


def test_a_playbook_that_includes_itself_under_another_id_names_the_loop(tmp_path):
    (tmp_path / "me.yaml").write_text(including("not-me", "me", ["m1"], "m0"))
    with pytest.raises(PlaybookError, match="include loop: me -> me$"):
        load_playbook(tmp_path / "me.yaml")


def include_chain(tmp_path: Path, depth: int) -> Path:
    """p0 includes from p1 ... includes from p{depth}; each pK has node kK and includes the rest."""
    for k in range(depth + 1):
        if k == depth:
            text = playbook(f"p{k}", [node(f"k{k}", LEAF)])
        else:
            text = including(f"p{k}", f"p{k + 1}", [f"k{j}" for j in range(k + 1, depth + 1)], f"k{k}")
        (tmp_path / f"p{k}.yaml").write_text(text)
    return tmp_path / "p0.yaml"


def test_a_short_include_chain_loads(tmp_path):
    assert set(load_playbook(include_chain(tmp_path, 3)).nodes) == {"k0", "k1", "k2", "k3"}


def test_an_include_chain_deeper_than_the_bound_is_refused(tmp_path):
    with pytest.raises(PlaybookError, match=f"includes nested more than {MAX_INCLUDE_DEPTH} playbooks deep"):
        load_playbook(include_chain(tmp_path, MAX_INCLUDE_DEPTH + 4))


def test_an_include_may_not_leave_the_playbook_directory(tmp_path):
    (tmp_path / "inner").mkdir()
    (tmp_path / "outer.yaml").write_text(GOOD)
    (tmp_path / "inner" / "me.yaml").write_text(including("me", "../outer", ["a"], "m0"))
    with pytest.raises(PlaybookError, match="cannot include from '../outer'"):
        load_playbook(tmp_path / "inner" / "me.yaml")


# --- 3. size ---------------------------------------------------------------------------------------


def test_a_file_over_the_size_bound_is_refused_before_parsing(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(GOOD + ("# padding\n" * (MAX_FILE_BYTES // 10 + 1)))  # valid YAML, just big
    with pytest.raises(PlaybookError, match=rf"^{re.escape(str(path))}: cannot read: \d+ bytes, more than a playbook"):
        load_playbook(path)


# --- 4. paths the OS refuses -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x" * 5000, "/tmp/" + "x" * 5000 + ".yaml", "a/" * 3000 + "p.yaml"],
                         ids=["long-id", "long-file-name", "long-path"])
def test_an_over_long_playbook_name_is_bad_input(name):
    with pytest.raises(BadInput) as info:
        find_playbook(name)
    assert "\n" not in str(info.value) and len(str(info.value)) < 1000


@pytest.mark.parametrize("name", ["x" * 5000, "/tmp/" + "x" * 5000 + ".yaml"], ids=["long-id", "long-file-name"])
def test_diagnose_with_an_over_long_playbook_is_one_line_and_exit_2(name):
    proc = run_fieldguide("diagnose", "--playbook", name, "--no-tui", "--", sys.executable, "-c", "pass", timeout=60)
    assert_one_line_error(proc, 2, "fieldguide: ")


def test_explain_with_an_over_long_id_is_one_line_and_exit_2():
    proc = run_fieldguide("explain", "/tmp/" + "x" * 5000, timeout=60)
    assert_one_line_error(proc, 2, "unknown cause or leaf")


def test_an_over_long_playbook_directory_is_a_problem_not_a_crash(tmp_path):
    proc = run_fieldguide("playbooks", env={"FIELDGUIDE_PLAYBOOKS": str(tmp_path / ("d" * 5000))}, timeout=60)
    assert proc.returncode == 0 and "slow-training" in proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


# --- 5. a directory of broken files ----------------------------------------------------------------


def hostile_dir(tmp_path: Path) -> tuple[Path, list[str]]:
    """A $FIELDGUIDE_PLAYBOOKS directory with one good playbook and one of each kind of bad file."""
    d = tmp_path / "user-playbooks"
    d.mkdir()
    (d / "good.yaml").write_text(GOOD)
    bad = {
        "badyaml.yaml": "id: [unclosed\ntitle: x\n",
        "bomb.yaml": bomb(),
        "cycle.yaml": playbook("cycle", [node("a", "b"), node("b", "a")]),
        "alist.yaml": "- just\n- a list\n",
        "markup.yaml": "id: x\n'[/red]': y\n",  # its problem names the field [/red]: not markup
    }
    for name, text in bad.items():
        (d / name).write_text(text)
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (d / "dir.yaml").mkdir()
    os.mkfifo(d / "fifo.yaml")  # reading it would block: it must not hang the listing
    (d / "dangling.yaml").symlink_to(d / "nowhere")
    (d / "locked.yaml").write_text("id: [\n")  # unreadable; malformed too, for a root that reads it
    (d / "locked.yaml").chmod(0)
    names = [*bad, "binary.yaml", "dir.yaml", "fifo.yaml", "dangling.yaml", "locked.yaml"]
    return d, names


def test_playbooks_lists_the_good_and_names_each_bad_file_on_one_line(tmp_path):
    d, bad = hostile_dir(tmp_path)
    proc = run_fieldguide("playbooks", env={"FIELDGUIDE_PLAYBOOKS": str(d)}, timeout=60)
    assert proc.returncode == 0, proc.stderr  # as for one bad file: the listing itself succeeded
    assert "Traceback" not in proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert "good" in listed and "slow-training" in listed and len(listed) == len(set(listed))
    problems = proc.stderr.splitlines()
    assert len(problems) == len(bad), proc.stderr
    for name in bad:
        assert sum(f"{d / name}" in line for line in problems) == 1, (name, proc.stderr)
    assert all(line.startswith("fieldguide: skipped a malformed playbook: ") for line in problems)


def test_explain_and_diagnose_still_work_beside_bad_files(tmp_path):
    d, _ = hostile_dir(tmp_path)
    env = {"FIELDGUIDE_PLAYBOOKS": str(d)}
    leaf = run_fieldguide("explain", "t.ok", env=env, timeout=60)
    assert leaf.returncode == 0 and "good" in leaf.stdout and "All fine." in leaf.stdout, leaf.stderr
    cause = run_fieldguide("explain", "input.waiting", env=env, timeout=60)
    assert cause.returncode == 0 and "Traceback" not in cause.stderr, cause.stderr
    for playbook_id, needle in [("cycle", "cycle: a -> b -> a"), ("bomb", "alias *l0"), ("dir", "directory"),
                                ("binary", "not UTF-8"), ("fifo", "not a regular file")]:
        proc = run_fieldguide("diagnose", "--playbook", playbook_id, "--no-tui", "--", sys.executable, "-c", "pass",
                              env=env, timeout=60)
        assert_one_line_error(proc, 2, needle)


def test_list_playbooks_collects_every_problem_in_process(tmp_path, monkeypatch):
    d, bad = hostile_dir(tmp_path)
    monkeypatch.setenv("FIELDGUIDE_PLAYBOOKS", str(d))
    problems: list[str] = []
    ids = {p.id for p in list_playbooks(problems)}
    assert "good" in ids and "slow-training" in ids
    assert len(problems) == len(bad) and all("\n" not in p for p in problems), problems
    with pytest.raises(PlaybookError):  # no list for problems: the first is raised, still a PlaybookError
        list_playbooks()


async def test_the_tui_picker_shows_the_good_playbooks_beside_bad_files(tmp_path, monkeypatch):
    from textual.widgets import OptionList

    from fieldguide.frontends.tui.app import make_app
    from fieldguide.frontends.tui.screens.picker import PlaybookPicker

    d, bad = hostile_dir(tmp_path)
    monkeypatch.setenv("FIELDGUIDE_PLAYBOOKS", str(d))
    app = make_app(cmd=[sys.executable, "-c", "pass"], scanner=lambda: [])
    async with app.run_test(size=(100, 40), notifications=True) as pilot:
        for _ in range(100):
            await pilot.pause(0.05)
            if isinstance(app.screen, PlaybookPicker) and app.screen.playbooks:
                break
        picker = app.screen
        assert isinstance(picker, PlaybookPicker), picker
        options = picker.query_one("#playbooks", OptionList)
        ids = {str(options.get_option_at_index(i).id) for i in range(options.option_count)}
        assert {"good", "slow-training"} <= ids
        await pilot.pause(0.2)  # the warnings are drawn (markup in a message must not crash them)
        warnings = [n.message for n in app._notifications]
        assert len(warnings) == len(bad) and app.is_running
    app.close_targets()


# --- issue 33 H3: nothing from a playbook reaches a shell or a process environment unchecked ----------

PAGE = """\
{cause_id}:
  title: A page
  summary: '{summary}'
  why: To see what a colleague's page may do.
  fix:
    - Nothing.
  verify: Never.
{experiment}"""


def page(cause_id: str = "test.page", summary: str = "fine", experiment: str = "") -> str:
    return PAGE.format(cause_id=cause_id, summary=summary, experiment=experiment)


@pytest.mark.parametrize("bad_id", ["x$(touch${IFS}PWNED)", "a`id`", "two words", "semi;colon"])
def test_a_playbook_or_node_id_that_is_no_id_is_refused_in_one_line(tmp_path: Path, bad_id: str) -> None:
    for text in (GOOD.replace("id: good\n", f"id: '{bad_id}'\n", 1),
                 playbook("good", [node(f"'{bad_id}'", LEAF)], start=f"'{bad_id}'")):
        path = tmp_path / "pb.yaml"
        path.write_text(text)
        with pytest.raises(PlaybookError) as info:
            load_playbook(path)
        said = str(info.value)
        assert "must be letters, digits" in said and len(said.splitlines()) == 1, said


@pytest.mark.parametrize("bad_id", ["'x$(touch${IFS}PWNED).y'", "'a.b c'", "nodot"])
def test_a_cause_id_that_is_no_id_is_refused(tmp_path: Path, bad_id: str) -> None:
    from fieldguide.playbook.causes import load_causes

    (tmp_path / "causes.yaml").write_text(page(bad_id))
    with pytest.raises(PlaybookError, match="must be area.name of letters"):
        load_causes(tmp_path)


@pytest.mark.parametrize("variable", ["PYTHONPATH", "LD_PRELOAD", "BASH_ENV", "PYTHONSTARTUP", "PATH"])
def test_an_experiment_may_not_set_a_variable_that_loads_code(tmp_path: Path, variable: str) -> None:
    from fieldguide.playbook.causes import load_causes

    (tmp_path / "causes.yaml").write_text(page(experiment=f"  experiment:\n    env: {{{variable}: /tmp/x}}\n"))
    with pytest.raises(PlaybookError) as info:
        load_causes(tmp_path)
    assert f"not {variable}" in str(info.value) and "env may set only" in str(info.value)


def test_an_experiment_may_set_a_known_setting(tmp_path: Path) -> None:
    from fieldguide.playbook.causes import load_causes

    (tmp_path / "causes.yaml").write_text(page(experiment="  experiment:\n    env: {OMP_NUM_THREADS: 4}\n"))
    assert load_causes(tmp_path)["test.page"].experiment["env"] == {"OMP_NUM_THREADS": "4"}


@pytest.mark.parametrize("summary", ["{x:>9999999999}", "{x:.99999f}", "{x:01000d}"])
def test_a_format_width_or_precision_over_three_digits_is_refused_at_load(tmp_path: Path, summary: str) -> None:
    from fieldguide.playbook.causes import load_causes

    (tmp_path / "causes.yaml").write_text(page(summary=summary))
    with pytest.raises(PlaybookError, match="at most 3 digits"):
        load_causes(tmp_path)


def test_a_pipe_given_as_a_playbook_is_said_to_be_no_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pb.yaml"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="is not a regular file"):
        find_playbook(str(fifo))
    with pytest.raises(BadInput, match="no playbook file"):
        find_playbook(str(tmp_path / "absent.yaml"))
