"""Find, read and validate playbooks. Errors name the file, the line, the node and the field."""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from fieldguide.errors import BadInput
from fieldguide.playbook.expect import ExpectationSyntaxError, parse_expectation
from fieldguide.playbook.schema import Cause, Edge, MeasureOption, Node, Playbook, template_fields
from fieldguide.playbook.yamlread import LineDict, read_yaml

CAUSES_FILE = "causes.yaml"
NODE_FIELDS = {"id", "question", "why", "measure", "pass", "depart", "error"}
PLAYBOOK_FIELDS = {"id", "title", "purpose", "start", "nodes", "leaves", "prefetch", "arm", "budget", "ready_timeout",
                   "torch_trace", "include"}
INCLUDE_FIELDS = {"playbook", "nodes", "continue"}
CAUSE_FIELDS = {"title", "summary", "why", "fix", "verify", "experiment"}
EXPERIMENT_FIELDS = {"override", "values", "env", "none"}


class PlaybookError(BadInput):
    """A malformed playbook: `file:line: node X: field Y: problem`."""

    def __init__(self, path: Path | str, line: int, problem: str, *, node: str | None = None, field: str | None = None):
        where = f"{path}:{line}" if line else str(path)
        parts = [where]
        if node:
            parts.append(f"node {node}")
        if field:
            parts.append(f"field {field}")
        super().__init__(": ".join(parts) + f": {problem}")
        self.path, self.line, self.node, self.field = Path(path), line, node, field


def playbook_dirs() -> list[Path]:
    """Where playbooks are found: $FIELDGUIDE_PLAYBOOKS (colon-separated), then the built-ins."""
    dirs = [Path(p) for p in os.environ.get("FIELDGUIDE_PLAYBOOKS", "").split(os.pathsep) if p]
    packaged = importlib.resources.files("fieldguide") / "_playbooks"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    else:  # a source checkout or an editable install: the top-level playbooks/
        dirs.append(Path(__file__).resolve().parents[3] / "playbooks")
    return dirs


def list_playbooks(problems: list[str] | None = None) -> list[Playbook]:
    """Every loadable playbook; a malformed one is skipped and its error appended to `problems`
    (or raised, when `problems` is None)."""
    seen: dict[str, Playbook] = {}
    for directory in playbook_dirs():
        for path in sorted(directory.glob("*.yaml")):
            if path.name == CAUSES_FILE or path.stem in seen:
                continue
            try:
                seen[path.stem] = load_playbook(path)
            except PlaybookError as err:
                if problems is None:
                    raise
                problems.append(str(err))
    return list(seen.values())


def find_playbook(playbook_id: str) -> Playbook:
    """A playbook by id, or by path to a .yaml file."""
    if playbook_id.endswith((".yaml", ".yml")) or os.sep in playbook_id:
        path = Path(playbook_id)
        if not path.is_file():
            raise BadInput(f"no playbook file {playbook_id}")
        return load_playbook(path)
    for directory in playbook_dirs():
        path = directory / f"{playbook_id}.yaml"
        if path.is_file():
            return load_playbook(path)
    known = sorted({p.stem for d in playbook_dirs() for p in d.glob("*.yaml") if p.name != CAUSES_FILE})
    raise BadInput(f"unknown playbook {playbook_id!r}; installed: {', '.join(known) or 'none'}")


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise PlaybookError(path, 0, f"cannot read: {err.strerror}") from None
    try:
        return read_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and context_mark is not None:
            problem += f" ({context.removeprefix('while ')} on line {context_mark.line + 1})"
        raise PlaybookError(path, mark.line + 1 if mark else 0, f"bad YAML: {problem}") from None


def _text(data: LineDict, key: str, path: Path, node: str | None, *, required: bool = True) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        problem = "is missing" if key not in data else "must be non-empty text"
        raise PlaybookError(path, data.line_of(key), problem, node=node, field=key)
    return value.strip()


def _check_fields(data: LineDict, allowed: set[str], path: Path, node: str | None) -> None:
    for key in data:
        if key not in allowed:
            raise PlaybookError(path, data.line_of(key), f"unknown field; allowed: {', '.join(sorted(allowed))}",
                                node=node, field=str(key))


def load_causes(directory: Path) -> dict[str, Cause]:
    """The field-guide pages of causes, from `causes.yaml` next to the playbooks."""
    causes: dict[str, Cause] = {}
    for d in [directory, *playbook_dirs()]:
        path = d / CAUSES_FILE
        if not path.is_file():
            continue
        data = _read(path)
        if not isinstance(data, LineDict):
            raise PlaybookError(path, 1, "must be a mapping of cause ids to pages")
        for cause_id, page in data.items():
            if cause_id in causes:
                continue
            if not isinstance(page, LineDict):
                raise PlaybookError(path, data.line_of(cause_id), "a cause page must be a mapping", field=str(cause_id))
            _check_fields(page, CAUSE_FIELDS, path, f"cause {cause_id}")
            fix = page.get("fix")
            if not isinstance(fix, list) or not fix or not all(isinstance(s, str) for s in fix):
                raise PlaybookError(path, page.line_of("fix"), "must be a list of steps (quote a step that contains \": \")", node=f"cause {cause_id}", field="fix")
            summary = _text(page, "summary", path, f"cause {cause_id}")
            try:
                template_fields(summary)
            except ValueError as err:
                raise PlaybookError(path, page.line_of("summary"), str(err), node=f"cause {cause_id}", field="summary") from None
            experiment = _experiment(page, path, str(cause_id))
            causes[cause_id] = Cause(
                id=cause_id,
                title=_text(page, "title", path, f"cause {cause_id}"),
                summary=summary,
                why=_text(page, "why", path, f"cause {cause_id}"),
                fix=tuple(s.strip() for s in fix),
                verify=_text(page, "verify", path, f"cause {cause_id}"),
                experiment=experiment,
            )
    return causes


def _experiment(page: LineDict, path: Path, cause_id: str) -> dict[str, Any] | None:
    """A cause's fix as an experiment fieldguide can run (`--try-fix`): an agent override with the
    values to try (`override`, `values`), an environment (`env`), or `none: why` for a fix that
    is a code change."""
    raw = page.get("experiment")
    if raw is None:
        return None
    where = (path, page.line_of("experiment"))
    if not isinstance(raw, LineDict) or not raw or set(raw) - EXPERIMENT_FIELDS:
        raise PlaybookError(*where, f"must be a mapping of {', '.join(sorted(EXPERIMENT_FIELDS))}",
                            node=f"cause {cause_id}", field="experiment")
    if "none" in raw:
        if set(raw) != {"none"} or not isinstance(raw["none"], str):
            raise PlaybookError(*where, "none: says why there is no experiment, alone", node=f"cause {cause_id}",
                                field="experiment")
        return {"none": raw["none"].strip()}
    override, values, env = raw.get("override"), raw.get("values"), raw.get("env")
    if override is not None and (not isinstance(override, str) or not isinstance(values, list) or not values):
        raise PlaybookError(*where, "override needs a name and a list of values to try", node=f"cause {cause_id}",
                            field="experiment")
    if env is not None and (not isinstance(env, dict) or not all(isinstance(v, (str, int)) for v in env.values())):
        raise PlaybookError(*where, "env must map variables to values", node=f"cause {cause_id}", field="experiment")
    if override is None and env is None:
        raise PlaybookError(*where, "needs an override with values, an env, or none", node=f"cause {cause_id}",
                            field="experiment")
    return {"override": override, "values": list(values or []), "env": {str(k): str(v) for k, v in (env or {}).items()}}


def _edge(raw: Any, key: str, data: LineDict, path: Path, node: str) -> Edge:
    line = data.line_of(key)
    if isinstance(raw, str) and raw.strip():
        return Edge(kind="node", target=raw.strip())
    if isinstance(raw, LineDict) and set(raw) == {"stop"}:
        # The walk ends inconclusive here, saying why: only where a node could not measure.
        if key not in ("error", "depart") or not isinstance(raw["stop"], str) or not raw["stop"].strip():
            raise PlaybookError(path, line, "{stop: WHY} ends a walk with no cause (it could not measure, or what it "
                                "measured puts the target outside the playbook): only an error or depart edge may "
                                "stop, and it must say why", node=node, field=key)
        return Edge(kind="stop", target=raw["stop"].strip())
    if isinstance(raw, LineDict) and len(set(raw) & {"cause", "leaf"}) == 1:
        extra = set(raw) - {"cause", "leaf", "summary"}
        if extra:
            raise PlaybookError(path, line, f"unknown edge field {sorted(extra)[0]!r}", node=node, field=key)
        kind = "cause" if "cause" in raw else "leaf"
        target = raw[kind]
        if not isinstance(target, str) or target.count(".") != 1:
            raise PlaybookError(path, line, f"{kind} must be an id of the form area.name", node=node, field=key)
        summary = raw.get("summary")
        if summary is not None and not isinstance(summary, str):
            raise PlaybookError(path, line, "summary must be text", node=node, field=f"{key}.summary")
        if summary is not None:
            try:
                template_fields(str(summary))
            except ValueError as err:
                raise PlaybookError(path, line, str(err), node=node, field=f"{key}.summary") from None
        return Edge(kind=kind, target=target, summary=summary)
    raise PlaybookError(path, line, "must be a node id, {cause: ID}, {leaf: ID} or (error, depart) {stop: WHY}",
                        node=node, field=key)


def _measure(raw: Any, data: LineDict, path: Path, node: str) -> tuple[MeasureOption, ...]:
    from fieldguide.probes import registry  # probe modules are light: heavy imports happen in run()

    line = data.line_of("measure")
    if not isinstance(raw, list) or not raw:
        raise PlaybookError(path, line, "must be a non-empty list of {probe, params, expect}", node=node, field="measure")
    options = []
    for i, item in enumerate(raw):
        where = f"measure[{i}]"
        if not isinstance(item, LineDict):
            raise PlaybookError(path, line, "must be a mapping", node=node, field=where)
        _check_fields(item, {"probe", "params", "expect"}, path, node)
        probe_id = item.get("probe")
        probe_cls = registry.get(probe_id) if isinstance(probe_id, str) else None
        if probe_cls is None:
            raise PlaybookError(path, item.line_of("probe"), f"unknown probe {probe_id!r}; known: {', '.join(registry.ids())}",
                                node=node, field=f"{where}.probe")
        params = item.get("params") or {}
        if not isinstance(params, dict):
            raise PlaybookError(path, item.line_of("params"), "must be a mapping", node=node, field=f"{where}.params")
        for name, value in params.items():
            if name not in probe_cls.params:
                raise PlaybookError(path, item.line_of("params"), f"probe {probe_id} has no parameter {name!r}; it takes: "
                                    f"{', '.join(probe_cls.params) or 'none'}", node=node, field=f"{where}.params.{name}")
            want = type(probe_cls.params[name])
            ok = (isinstance(value, want) and (want is bool or not isinstance(value, bool))) or (
                want is float and isinstance(value, int) and not isinstance(value, bool))
            if not ok:
                raise PlaybookError(path, item.line_of("params"), f"{name} must be {want.__name__}, got {value!r}",
                                    node=node, field=f"{where}.params.{name}")
        try:
            expectation = parse_expectation(item.get("expect"), f"{where}.expect")
        except ExpectationSyntaxError as err:
            raise PlaybookError(path, item.line_of("expect"), str(err), node=node, field=err.field) from None
        unknown = [n for n in expectation.names() if probe_cls.values and n not in probe_cls.values]
        if unknown:
            raise PlaybookError(path, item.line_of("expect"), f"probe {probe_id} measures no value {unknown[0]!r}; it gives: "
                                f"{', '.join(probe_cls.values)}", node=node, field=f"{where}.expect")
        options.append(MeasureOption(probe=str(probe_id), params=dict(params), expect=expectation))
    return tuple(options)


def load_playbook(path: Path) -> Playbook:
    path = Path(path)
    data = _read(path)
    if not isinstance(data, LineDict):
        raise PlaybookError(path, 1, "a playbook must be a mapping with id, title, purpose, start, nodes")
    _check_fields(data, PLAYBOOK_FIELDS, path, None)
    playbook_id = _text(data, "id", path, None)
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise PlaybookError(path, data.line_of("nodes"), "must be a non-empty list of nodes", field="nodes")
    nodes: dict[str, Node] = {}
    for raw in raw_nodes:
        if not isinstance(raw, LineDict):
            raise PlaybookError(path, data.line_of("nodes"), "each node must be a mapping", field="nodes")
        node_id = raw.get("id")
        if not isinstance(node_id, str) or not node_id:
            raise PlaybookError(path, raw.line, "is missing", field="id")
        if node_id in nodes:
            raise PlaybookError(path, raw.line, "duplicate node id", node=node_id, field="id")
        _check_fields(raw, NODE_FIELDS, path, node_id)
        for key in ("pass", "depart"):
            if key not in raw:
                raise PlaybookError(path, raw.line, "is missing: every node needs both a pass and a depart edge",
                                    node=node_id, field=key)
        nodes[node_id] = Node(
            id=node_id,
            question=_text(raw, "question", path, node_id),
            why=_text(raw, "why", path, node_id),
            measure=_measure(raw.get("measure"), raw, path, node_id),
            on_pass=_edge(raw["pass"], "pass", raw, path, node_id),
            on_depart=_edge(raw["depart"], "depart", raw, path, node_id),
            on_error=_edge(raw["error"], "error", raw, path, node_id) if "error" in raw else None,
            line=raw.line,
        )
    for spec in data.get("include") or []:
        for node_id, node in _included(spec, data, path).items():
            if node_id in nodes:
                raise PlaybookError(path, data.line_of("include"), f"includes node {node_id!r}, which this playbook "
                                    "defines too", field="include")
            nodes[node_id] = node
    causes = load_causes(path.parent)
    leaves = data.get("leaves") or {}
    if not isinstance(leaves, dict):
        raise PlaybookError(path, data.line_of("leaves"), "must map leaf ids to what they mean", field="leaves")
    # Every edge must land somewhere real.
    for node in nodes.values():
        for key, edge in (("pass", node.on_pass), ("depart", node.on_depart), ("error", node.on_error)):
            if edge is None:
                continue
            line = next((r.line_of(key) for r in raw_nodes if r.get("id") == node.id), node.line)
            if edge.kind == "node" and edge.target not in nodes:
                raise PlaybookError(path, line, f"points to unknown node {edge.target!r}", node=node.id, field=key)
            if edge.kind == "cause" and edge.target not in causes:
                raise PlaybookError(path, line, f"unknown cause {edge.target!r} (no page in {CAUSES_FILE})",
                                    node=node.id, field=key)
            if edge.kind == "cause" and key == "error":
                raise PlaybookError(path, line, "a node that could not measure cannot name a cause; "
                                    "lead it to another node or a leaf", node=node.id, field=key)
            if edge.kind == "leaf" and key == "depart":
                raise PlaybookError(path, line, "a departure cannot lead to a healthy leaf", node=node.id, field=key)
            if edge.kind == "leaf" and edge.target not in leaves:
                raise PlaybookError(path, line, f"leaf {edge.target!r} is not described under `leaves`", node=node.id, field=key)
    start = _text(data, "start", path, None)
    if start not in nodes:
        raise PlaybookError(path, data.line_of("start"), f"unknown start node {start!r}", field="start")
    _check_acyclic(nodes, start, path)
    prefetch = _prefetch(data, nodes, path)
    arm = data.get("arm") or []
    if not isinstance(arm, list) or not all(
            isinstance(a, str) and all(part.isidentifier() for part in a.split(":")) for a in arm):
        raise PlaybookError(path, data.line_of("arm"), "must be a list of agent capability names, each with "
                            "optional :options (memory:history)", field="arm")
    seconds = {}
    for key in ("budget", "ready_timeout"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise PlaybookError(path, data.line_of(key), "must be a positive number of seconds", field=key)
        seconds[key] = float(value) if value is not None else None
    torch_trace = data.get("torch_trace", False)
    if not isinstance(torch_trace, bool):
        raise PlaybookError(path, data.line_of("torch_trace"), "must be true or false", field="torch_trace")
    return Playbook(
        id=playbook_id,
        title=_text(data, "title", path, None),
        purpose=_text(data, "purpose", path, None),
        start=start,
        nodes=nodes,
        causes={k: v for k, v in causes.items()},
        leaves={str(k): str(v) for k, v in leaves.items()},
        prefetch=prefetch,
        arm=tuple(arm),
        budget=seconds["budget"],
        ready_timeout=seconds["ready_timeout"],
        torch_trace=torch_trace,
        source=path,
    )


def _included(spec: Any, data: LineDict, path: Path) -> dict[str, Node]:
    """Nodes of another playbook, by reference: `include: [{playbook: ID, nodes: [...], continue:
    {a node (or leaf) of ID the included nodes lead to: this playbook's node (or leaf) instead}}]`.
    The definitions stay in one place; only where they lead changes."""
    line = data.line_of("include")
    if not isinstance(spec, LineDict):
        raise PlaybookError(path, line, "each include must be a mapping with playbook, nodes, continue", field="include")
    _check_fields(spec, INCLUDE_FIELDS, path, None)
    other_id, wanted, leads = spec.get("playbook"), spec.get("nodes"), spec.get("continue") or {}
    if not isinstance(other_id, str) or not isinstance(wanted, list) or not isinstance(leads, dict):
        raise PlaybookError(path, spec.line, "include needs playbook (an id), nodes (a list) and continue (a mapping)",
                            field="include")
    other_path = path.parent / f"{other_id}.yaml"
    if other_id == data.get("id") or not other_path.is_file():
        raise PlaybookError(path, spec.line, f"cannot include from {other_id!r}: no such playbook beside this one",
                            field="include")
    other = load_playbook(other_path)
    found: dict[str, Node] = {}
    for node_id in wanted:
        if node_id not in other.nodes:
            raise PlaybookError(path, spec.line, f"{other_id} has no node {node_id!r}", field="include")
        node = other.nodes[node_id]
        edges = {}
        for key in ("on_pass", "on_depart", "on_error"):
            edge = getattr(node, key)
            if edge is not None and edge.kind in ("node", "leaf") and edge.target in leads:
                edge = replace(edge, target=str(leads[edge.target]))  # here, not where the other playbook went
            elif edge is not None and edge.kind == "node" and edge.target not in wanted:
                raise PlaybookError(path, spec.line, f"included node {node_id} leads to {other_id}'s "
                                    f"{edge.target}: say under `continue` where to go instead", field="include")
            edges[key] = edge
        found[node_id] = replace(node, **edges)
    return found


def _prefetch(data: LineDict, nodes: dict[str, Node], path: Path) -> tuple[MeasureOption, ...]:
    """`prefetch: [probe ids]`: windows that start with the walk, each with the parameters its
    nodes give it (so the node that asks finds it measured, or in flight)."""
    raw = data.get("prefetch") or []
    line = data.line_of("prefetch")
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise PlaybookError(path, line, "must be a list of probe ids", field="prefetch")
    options = {o.probe: o for n in nodes.values() for o in n.measure}
    found = []
    for probe_id in raw:
        if probe_id not in options:
            raise PlaybookError(path, line, f"{probe_id!r} is measured by no node of this playbook", field="prefetch")
        found.append(options[probe_id])
    return tuple(found)


def _check_acyclic(nodes: dict[str, Node], start: str, path: Path) -> None:
    """A walk must end: no edge may lead back to a node already on the way."""
    def visit(node_id: str, trail: tuple[str, ...]) -> None:
        if node_id in trail:
            raise PlaybookError(path, nodes[node_id].line, f"cycle: {' -> '.join((*trail, node_id))}", node=node_id)
        node = nodes[node_id]
        for edge in (node.on_pass, node.on_depart, node.on_error):
            if edge is not None and edge.kind == "node":
                visit(edge.target, (*trail, node_id))

    visit(start, ())
