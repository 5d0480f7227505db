"""Loading and validating playbooks: the real one loads; malformed ones fail with file:line: node: field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fieldguide.errors import BadInput
from fieldguide.playbook import (
    PlaybookError,
    find_playbook,
    list_playbooks,
    load_causes,
    load_playbook,
)
from fieldguide.playbook.loader import playbook_dirs
from fieldguide.playbook.schema import template_fields
from fieldguide.probes import registry

# The cause ids fixed by CONTRACT.md.
CONTRACT_CAUSES = {
    "input.waiting", "input.cpu_bound", "input.worker_startup", "input.h2d_copy", "host.debug_mode",
    "host.blocking_io", "host.overhead_bound", "host.sync", "timing.unsynchronized", "device.shared",
    "device.throttled", "memory.leak_across_steps", "memory.fragmentation", "memory.activations",
    "memory.optimizer_state", "memory.other_process", "compile.mismatch", "compile.cold_start",
    "compile.recompiles", "compile.graph_breaks", "compile.slower", "dist.straggler", "dist.comm_bound",
    "dist.waits_on_remote_ranks",
    "dist.imbalance",
    "host.loop_work",  # the loop's own work beside the step (issue 32)
    "device.precision", "host.threads_limited",  # a busy device doing its work the slow way (issue 36)
}

TINY = """\
id: tiny
title: Tiny
purpose: A tiny playbook for the loader tests.
start: a
leaves:
  device.compute_bound: Steps are spent computing.
nodes:
  - id: a
    question: Does each step wait for its next batch?
    why: Because waiting is idle time.
    measure:
      - probe: loop.steps
        expect:
          data_wait_fraction: {below: 0.1}
    pass: b
    depart: {cause: input.waiting}
  - id: b
    question: Does the loop block on I/O?
    why: Because I/O blocks the training thread.
    measure:
      - probe: stacks.sample
        params: {seconds: 2.0}
        expect:
          io_fraction: {below: 0.1}
    pass: {leaf: device.compute_bound}
    depart: {cause: host.blocking_io}
"""


@pytest.fixture(autouse=True)
def _no_user_playbook_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIELDGUIDE_PLAYBOOKS", raising=False)


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line number of the nth line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) >= nth, f"{needle!r} not in text"
    return hits[nth - 1]


def write(tmp_path: Path, text: str, name: str = "tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def mutate(old: str, new: str, text: str = TINY, count: int = 1) -> str:
    assert old in text, old
    return text.replace(old, new, count)


def load_error(tmp_path: Path, text: str) -> tuple[PlaybookError, Path]:
    path = write(tmp_path, text)
    with pytest.raises(PlaybookError) as info:
        load_playbook(path)
    return info.value, path


def assert_names(err: PlaybookError, path: Path, line: int, node: str | None, field: str | None) -> None:
    message = str(err)
    assert err.path == path
    assert err.line == line, message
    assert err.node == node, message
    assert err.field == field, message
    assert message.startswith(f"{path}:{line}: "), message
    if node:
        assert f"node {node}" in message
    if field:
        assert f"field {field}" in message


# --- the real playbook ------------------------------------------------------------------------------

def test_slow_training_loads_with_its_nodes(slow_training):
    pb = slow_training
    assert pb.id == "slow-training"
    assert pb.start == "target.trains"
    assert set(pb.nodes) == {"target.trains", "dist.ranks", "dist.uneven", "dist.remote", "dist.comm", "env.debug-flags", "input.worker-startup", "input.data-wait",
                             "input.producer", "host.blocking-io", "host.loop-work", "host.overhead", "device.efficiency",
                             "host.threads"}
    assert "device.compute_bound" in pb.leaves
    assert pb.source is not None and pb.source.name == "slow-training.yaml"


def test_every_node_has_question_why_and_measure_options(slow_training):
    for node in slow_training.nodes.values():
        assert node.question.strip().endswith("?"), node.id
        assert len(node.why.split()) >= 10, node.id
        assert node.measure, node.id
        for option in node.measure:
            assert registry.get(option.probe) is not None
            assert option.expect.describe()


def test_every_cause_the_playbook_names_has_a_full_page(slow_training):
    named = {e.target for n in slow_training.nodes.values() for e in (n.on_pass, n.on_depart, n.on_error)
             if e is not None and e.kind == "cause"}
    assert named == {"dist.straggler", "dist.imbalance", "dist.comm_bound", "dist.waits_on_remote_ranks", "host.debug_mode", "input.worker_startup", "input.waiting",
                     "input.cpu_bound", "host.blocking_io", "host.loop_work", "host.overhead_bound", "device.precision",
                     "host.threads_limited"}
    assert named <= CONTRACT_CAUSES
    for cause_id in named:
        cause = slow_training.causes[cause_id]
        assert cause.id == cause_id
        for section in (cause.title, cause.summary, cause.why, cause.verify):
            assert section.strip()
        assert cause.fix and all(step.strip() for step in cause.fix)


def test_cause_summaries_only_use_values_some_probe_measures(slow_training):
    known = {name for pid in registry.ids() for name in registry.get(pid).values}
    for cause in slow_training.causes.values():
        for name in template_fields(cause.summary):
            assert name in known, f"{cause.id} summary uses {name!r}, which no probe measures"


def test_edges_of_the_real_playbook(slow_training):
    nodes = slow_training.nodes
    trains = nodes["target.trains"]
    assert [o.probe for o in trains.measure] == ["training.activity"]
    assert trains.measure[0].expect.describe() == "trains == true"
    assert (trains.on_pass.kind, trains.on_pass.target) == ("node", "dist.ranks")
    assert (trains.on_depart.kind, trains.on_depart.target) == ("stop", "not a training job, so no cause: {seen}")
    assert (trains.on_error.kind, trains.on_error.target) == ("stop", "could not tell whether it trains, so no cause")
    assert [o.probe for o in nodes["input.producer"].measure] == ["loop.steps", "stacks.sample", "process.cpu"]
    assert nodes["env.debug-flags"].on_pass.target == "input.worker-startup"
    assert (nodes["env.debug-flags"].on_depart.kind, nodes["env.debug-flags"].on_depart.target) == \
        ("cause", "host.debug_mode")
    assert nodes["input.data-wait"].on_depart.target == "input.producer"
    assert (nodes["host.overhead"].on_pass.kind, nodes["host.overhead"].on_pass.target) == ("node", "device.efficiency")
    assert (nodes["device.efficiency"].on_depart.kind, nodes["device.efficiency"].on_depart.target) == \
        ("cause", "device.precision")
    assert (nodes["host.threads"].on_pass.kind, nodes["host.threads"].on_pass.target) == ("leaf", "device.compute_bound")
    assert nodes["host.overhead"].measure[0].params == {"steps": 5}


def test_list_playbooks_and_find_by_path(slow_training):
    ids = [p.id for p in list_playbooks()]
    assert "slow-training" in ids
    assert all(p != "causes" for p in ids)
    by_path = find_playbook(str(slow_training.source))
    assert by_path.id == "slow-training"


def test_find_playbook_unknown_names_the_installed_ones():
    with pytest.raises(BadInput) as info:
        find_playbook("nope")
    message = str(info.value)
    assert "unknown playbook 'nope'" in message
    assert "installed:" in message and "slow-training" in message
    assert "causes" not in message.split("installed:")[1]
    assert info.value.exit_code == 2


def test_find_playbook_missing_file_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no playbook file"):
        find_playbook(str(tmp_path / "missing.yaml"))


def test_user_playbook_dir_comes_first(tmp_path, monkeypatch):
    write(tmp_path, TINY)
    monkeypatch.setenv("FIELDGUIDE_PLAYBOOKS", str(tmp_path))
    assert playbook_dirs()[0] == tmp_path
    assert find_playbook("tiny").id == "tiny"
    assert {"tiny", "slow-training"} <= {p.id for p in list_playbooks()}


# --- a valid tmp playbook ------------------------------------------------------------------------------

def test_tiny_playbook_loads_with_builtin_causes(tmp_path):
    pb = load_playbook(write(tmp_path, TINY))
    assert pb.id == "tiny" and pb.start == "a"
    assert pb.nodes["a"].line == line_of(TINY, "- id: a")
    assert pb.nodes["b"].measure[0].params == {"seconds": 2.0}
    assert pb.causes["input.waiting"].title.startswith("The training loop waits")


def test_int_is_accepted_for_a_float_param(tmp_path):
    pb = load_playbook(write(tmp_path, mutate("{seconds: 2.0}", "{seconds: 2}")))
    assert pb.nodes["b"].measure[0].params == {"seconds": 2}


def test_local_causes_file_adds_and_overrides_causes(tmp_path):
    (tmp_path / "causes.yaml").write_text(
        "test.local:\n"
        "  title: A local cause\n"
        "  summary: '{io_fraction:.0%} of samples'\n"
        "  why: Tests need one.\n"
        "  fix:\n"
        "    - Do the thing.\n"
        "  verify: Run again.\n"
        "input.waiting:\n"
        "  title: Overridden title\n"
        "  summary: waits\n"
        "  why: because\n"
        "  fix: [wait less]\n"
        "  verify: again\n", encoding="utf-8")
    pb = load_playbook(write(tmp_path, mutate("{cause: host.blocking_io}", "{cause: test.local}")))
    assert pb.causes["test.local"].title == "A local cause"
    assert pb.causes["test.local"].fix == ("Do the thing.",)
    assert pb.causes["input.waiting"].title == "Overridden title"
    assert pb.causes["host.debug_mode"].title == "Debugging switches are left on"  # built-ins still there
    assert "test.local" in load_causes(tmp_path)


# --- malformed playbooks -------------------------------------------------------------------------------

def test_bad_yaml_syntax_names_file_and_line(tmp_path):
    text = mutate("question: Does the loop block on I/O?", "question: Does it: block")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "Does it: block"), None, None)
    assert "bad YAML" in str(err) and "mapping values are not allowed" in str(err)


def test_unclosed_flow_mapping_names_where_it_began(tmp_path):
    text = mutate("depart: {cause: input.waiting}", "depart: {cause: input.waiting")
    err, path = load_error(tmp_path, text)
    began = line_of(text, "depart: {cause: input.waiting")
    assert_names(err, path, began + 1, None, None)  # the problem shows on the next line
    assert f"(parsing a flow mapping on line {began})" in str(err)


def test_duplicate_key_is_bad_yaml_at_the_duplicate(tmp_path):
    text = mutate("    why: Because waiting is idle time.\n",
                  "    why: Because waiting is idle time.\n    why: Twice.\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "why: Twice."), None, None)
    assert "duplicate key 'why'" in str(err)


def test_top_level_not_a_mapping(tmp_path):
    err, path = load_error(tmp_path, "- just\n- a list\n")
    assert err.line == 1 and "must be a mapping" in str(err)


def test_unknown_top_level_field(tmp_path):
    text = mutate("start: a\n", "start: a\nauthor: me\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "author: me"), None, "author")


def test_unknown_probe_id(tmp_path):
    text = mutate("probe: loop.steps", "probe: loop.nope")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "probe: loop.nope"), "a", "measure[0].probe")
    assert "unknown probe 'loop.nope'" in str(err) and "loop.steps" in str(err)


def test_unknown_field_on_a_node(tmp_path):
    text = mutate("    pass: b\n", "    pass: b\n    colour: red\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "colour: red"), "a", "colour")
    assert "unknown field" in str(err) and "depart" in str(err)


def test_unknown_field_in_a_measure_option(tmp_path):
    text = mutate("      - probe: loop.steps\n", "      - probe: loop.steps\n        timeout: 3\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "timeout: 3"), "a", "timeout")


def test_node_missing_its_depart_edge(tmp_path):
    text = mutate("    depart: {cause: host.blocking_io}\n", "")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "- id: b"), "b", "depart")
    assert "is missing" in str(err)


def test_node_missing_its_question(tmp_path):
    text = mutate("    question: Does the loop block on I/O?\n", "")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "- id: b"), "b", "question")
    assert "is missing" in str(err)


def test_node_with_empty_why(tmp_path):
    text = mutate("why: Because I/O blocks the training thread.", "why: ''")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "why: ''"), "b", "why")
    assert "non-empty" in str(err)


def test_duplicate_node_id(tmp_path):
    text = mutate("  - id: b\n", "  - id: a\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "- id: a", nth=2), "a", "id")
    assert "duplicate node id" in str(err)


def test_edge_to_unknown_node(tmp_path):
    text = mutate("    pass: b\n", "    pass: c\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "pass: c"), "a", "pass")
    assert "unknown node 'c'" in str(err)


def test_edge_to_unknown_cause(tmp_path):
    text = mutate("{cause: input.waiting}", "{cause: input.nope}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "cause: input.nope"), "a", "depart")
    assert "unknown cause 'input.nope'" in str(err)


def test_cause_id_must_be_area_dot_name(tmp_path):
    text = mutate("{cause: input.waiting}", "{cause: waiting}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "cause: waiting"), "a", "depart")
    assert "area.name" in str(err)


def test_edge_with_unknown_field(tmp_path):
    text = mutate("{cause: input.waiting}", "{cause: input.waiting, colour: red}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "colour: red"), "a", "depart")


def test_an_error_edge_may_stop_the_walk_saying_why(tmp_path):
    text = mutate("    pass: b\n", '    pass: b\n    error: {stop: "  no loop to time  "}\n')
    pb = load_playbook(write(tmp_path, text))
    assert (pb.nodes["a"].on_error.kind, pb.nodes["a"].on_error.target) == ("stop", "no loop to time")
    assert pb.nodes["b"].on_error is None


def test_a_pass_edge_may_not_stop(tmp_path):
    text = mutate("    pass: b\n", '    pass: {stop: "no loop to time"}\n')
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "pass: {stop"), "a", "pass")
    assert "only an error or depart edge may stop" in str(err)


def test_a_depart_edge_may_stop_when_the_target_is_outside_the_playbook(tmp_path):
    # compile-regression on a job that compiles nothing: measured, and nothing to attribute.
    text = mutate("    depart: {cause: input.waiting}\n", '    depart: {stop: "compiles nothing"}\n')
    pb = load_playbook(write(tmp_path, text))
    assert (pb.nodes["a"].on_depart.kind, pb.nodes["a"].on_depart.target) == ("stop", "compiles nothing")


@pytest.mark.parametrize("why", ['""', '"   "', "[a, b]"])
def test_a_stop_must_say_why(tmp_path, why):
    text = mutate("    pass: b\n", f"    pass: b\n    error: {{stop: {why}}}\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "error: {stop"), "a", "error")
    assert "it must say why" in str(err)


def test_departure_cannot_lead_to_a_leaf(tmp_path):
    text = mutate("{cause: host.blocking_io}", "{leaf: device.compute_bound}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "depart: {leaf"), "b", "depart")


def test_leaf_must_be_described(tmp_path):
    text = mutate("pass: {leaf: device.compute_bound}", "pass: {leaf: device.elsewhere}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "device.elsewhere"), "b", "pass")
    assert "leaves" in str(err)


def test_unknown_start_node(tmp_path):
    text = mutate("start: a", "start: z")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "start: z"), None, "start")


def test_cycle_is_rejected(tmp_path):
    text = mutate("pass: {leaf: device.compute_bound}", "pass: a")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "- id: a"), "a", None)
    assert "cycle: a -> b -> a" in str(err)


def test_self_loop_is_a_cycle(tmp_path):
    text = mutate("    pass: b\n", "    pass: a\n")
    err, path = load_error(tmp_path, text)
    assert err.node == "a" and "cycle: a -> a" in str(err)


def test_expectation_with_unknown_operator(tmp_path):
    text = mutate("data_wait_fraction: {below: 0.1}", "data_wait_fraction: {beneath: 0.1}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "expect:"), "a", "measure[0].expect.data_wait_fraction.beneath")
    assert "unknown operator 'beneath'" in str(err) and "below" in str(err)


def test_expectation_with_non_number_for_a_comparison(tmp_path):
    text = mutate("data_wait_fraction: {below: 0.1}", "data_wait_fraction: {below: low}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "expect:"), "a", "measure[0].expect.data_wait_fraction.below")
    assert "needs a number" in str(err)


def test_expectation_missing(tmp_path):
    text = mutate("        expect:\n          data_wait_fraction: {below: 0.1}\n", "")
    err, path = load_error(tmp_path, text)
    assert err.node == "a" and err.field == "measure[0].expect"


def test_expectation_naming_a_value_the_probe_does_not_measure(tmp_path):
    text = mutate("data_wait_fraction: {below: 0.1}", "gpu_util: {below: 0.1}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "expect:"), "a", "measure[0].expect")
    assert "measures no value 'gpu_util'" in str(err) and "data_wait_fraction" in str(err)


def test_expectation_naming_an_unmeasured_value_inside_any(tmp_path):
    text = mutate("io_fraction: {below: 0.1}",
                  "any:\n            - io_fraction: {below: 0.1}\n            - gpu_util: {above: 3}")
    err, path = load_error(tmp_path, text)
    assert err.node == "b" and err.field == "measure[0].expect" and "gpu_util" in str(err)


def test_bad_param_type(tmp_path):
    text = mutate("{seconds: 2.0}", "{seconds: fast}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "params:"), "b", "measure[0].params.seconds")
    assert "seconds must be float, got 'fast'" in str(err)


def test_unknown_param_name(tmp_path):
    text = mutate("{seconds: 2.0}", "{secs: 2.0}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "params:"), "b", "measure[0].params.secs")
    assert "no parameter 'secs'" in str(err) and "seconds" in str(err)


def test_params_must_be_a_mapping(tmp_path):
    text = mutate("{seconds: 2.0}", "[2.0]")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "params:"), "b", "measure[0].params")


def test_float_is_rejected_for_an_int_param(tmp_path):
    text = mutate("probe: stacks.sample\n        params: {seconds: 2.0}",
                  "probe: stacks.sample\n        params: {rate: 2.5}")
    err, path = load_error(tmp_path, text)
    assert err.field == "measure[0].params.rate" and "rate must be int" in str(err)


def test_bool_is_rejected_for_an_int_param(tmp_path):
    text = mutate("probe: stacks.sample\n        params: {seconds: 2.0}",
                  "probe: stacks.sample\n        params: {rate: true}")
    err, path = load_error(tmp_path, text)
    assert err.field == "measure[0].params.rate"


def test_empty_measure_list(tmp_path):
    text = mutate("    measure:\n      - probe: loop.steps\n        expect:\n          data_wait_fraction: {below: 0.1}\n",
                  "    measure: []\n")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "measure: []"), "a", "measure")


@pytest.mark.parametrize("template", ["{data_wait_fraction.__class__}", "{data_wait_fraction[0]}",
                                      "{data_wait_fraction!r}", "{0}", "{}", "{data_wait_fraction:{x}}"])
def test_edge_summary_template_must_use_plain_names(tmp_path, template):
    text = mutate("{cause: input.waiting}", "{cause: input.waiting, summary: '" + template + "'}")
    err, path = load_error(tmp_path, text)
    assert_names(err, path, line_of(text, "summary:"), "a", "depart.summary")


def test_edge_summary_with_plain_names_loads(tmp_path):
    text = mutate("{cause: input.waiting}", "{cause: input.waiting, summary: '{data_wait_fraction:.0%} waiting'}")
    pb = load_playbook(write(tmp_path, text))
    assert pb.nodes["a"].on_depart.summary == "{data_wait_fraction:.0%} waiting"


CAUSE_PAGE = """\
test.evil:
  title: Evil
  summary: 'leaks {x.__class__}'
  why: To see whether templates can reach attributes.
  fix:
    - Nothing.
  verify: Never.
"""


def test_cause_summary_template_with_attribute_access_is_rejected(tmp_path):
    causes = tmp_path / "causes.yaml"
    causes.write_text(CAUSE_PAGE, encoding="utf-8")
    with pytest.raises(PlaybookError) as info:
        load_playbook(write(tmp_path, TINY))
    err = info.value
    assert_names(err, causes, line_of(CAUSE_PAGE, "summary:"), "cause test.evil", "summary")
    assert "plain value name" in str(err)


def test_cause_page_with_fix_not_a_list(tmp_path):
    page = CAUSE_PAGE.replace("leaks {x.__class__}", "fine").replace("  fix:\n    - Nothing.\n", "  fix: Nothing.\n")
    causes = tmp_path / "causes.yaml"
    causes.write_text(page, encoding="utf-8")
    with pytest.raises(PlaybookError) as info:
        load_causes(tmp_path)
    assert_names(info.value, causes, line_of(page, "fix:"), "cause test.evil", "fix")


def test_cause_page_with_unknown_section(tmp_path):
    page = CAUSE_PAGE.replace("leaks {x.__class__}", "fine") + "  seealso: elsewhere\n"
    causes = tmp_path / "causes.yaml"
    causes.write_text(page, encoding="utf-8")
    with pytest.raises(PlaybookError) as info:
        load_causes(tmp_path)
    assert_names(info.value, causes, line_of(page, "seealso"), "cause test.evil", "seealso")


def test_unreadable_file_is_playbook_error(tmp_path):
    with pytest.raises(PlaybookError, match="cannot read"):
        load_playbook(tmp_path / "absent.yaml")


def test_playbook_error_is_bad_input_with_exit_2(tmp_path):
    err, _ = load_error(tmp_path, mutate("probe: loop.steps", "probe: loop.nope"))
    assert isinstance(err, BadInput) and err.exit_code == 2


def test_yaml_python_tags_are_not_executed(tmp_path):
    text = mutate("title: Tiny", "title: !!python/object/apply:os.system ['echo pwned']")
    err, path = load_error(tmp_path, text)
    assert "bad YAML" in str(err)


def test_low_gpu_util_includes_slow_training_nodes_by_reference():
    from fieldguide.playbook import find_playbook

    slow, low = find_playbook("slow-training"), find_playbook("low-gpu-util")
    for node_id in ("target.trains", "dist.ranks", "dist.comm", "env.debug-flags", "input.data-wait", "input.producer", "host.overhead"):
        assert low.nodes[node_id].question == slow.nodes[node_id].question  # one definition
        assert low.nodes[node_id].measure == slow.nodes[node_id].measure
    # Only where they lead changes: after the debug switches, the GPU; after the input, the step's syncs.
    assert low.nodes["env.debug-flags"].on_pass.target == "device.shared"
    assert low.nodes["input.data-wait"].on_pass.target == "host.sync"
    assert (low.nodes["host.overhead"].on_pass.kind, low.nodes["host.overhead"].on_pass.target) == ("leaf", "device.busy")
    assert slow.nodes["input.data-wait"].on_pass.target == "host.blocking-io"  # the original is untouched


def test_an_included_node_whose_edge_leads_nowhere_here_is_named(tmp_path):
    import shutil

    from fieldguide.playbook import find_playbook

    shutil.copy(find_playbook("slow-training").source, tmp_path / "slow-training.yaml")
    (tmp_path / "causes.yaml").write_text((find_playbook("slow-training").source.parent / "causes.yaml").read_text())
    mine = tmp_path / "mine.yaml"
    mine.write_text(textwrap.dedent("""\
        id: mine
        title: t
        purpose: p
        start: input.data-wait
        include:
          - playbook: slow-training
            nodes: [input.data-wait, input.producer]
        leaves: {t.ok: fine}
        nodes:
          - id: own
            question: q?
            why: w
            measure:
              - probe: loop.steps
                expect: {data_wait_fraction: {below: 0.1}}
            pass: {leaf: t.ok}
            depart: {leaf: t.ok}
    """))
    with pytest.raises(PlaybookError) as info:
        load_playbook(mine)
    assert "included node input.data-wait leads to slow-training's host.blocking-io" in str(info.value)
    assert "continue" in str(info.value)


def test_a_trusted_bundled_playbook_reads_as_the_checked_one_without_loading_the_probes():
    """The TUI's first screen reads a bundled playbook without the probe modules (the suite holds
    every bundled playbook to the full check, above); the result is the same playbook."""
    import subprocess
    import sys

    code = ("import sys; from fieldguide.playbook import find_playbook; "
            "p = find_playbook('slow-training', trust_bundled=True); "
            "print(sorted(m for m in sys.modules if m.startswith('fieldguide.probes.')), len(p.nodes))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("[] "), out  # no probe module was imported
    for playbook in list_playbooks():
        trusted = find_playbook(playbook.id, trust_bundled=True)
        assert trusted.nodes == find_playbook(playbook.id).nodes, playbook.id


def test_a_users_playbook_is_checked_even_when_bundled_ones_are_trusted(tmp_path, monkeypatch):
    write(tmp_path, mutate("probe: loop.steps", "probe: loop.nope"))
    monkeypatch.setenv("FIELDGUIDE_PLAYBOOKS", str(tmp_path))
    with pytest.raises(PlaybookError, match="unknown probe 'loop.nope'"):
        find_playbook("tiny", trust_bundled=True)
