"""Find, read and validate playbooks. Errors name the file, the line, the node and the field."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fieldguide.errors import BadInput
from fieldguide.playbook.causes import CAUSES_FILE, load_causes
from fieldguide.playbook.expect import Expectation, ExpectationSyntaxError, parse_expectation
from fieldguide.playbook.graph import check_acyclic
from fieldguide.playbook.schema import (
    Edge,
    MeasureOption,
    Node,
    Playbook,
    check_id,
    template_fields,
)
from fieldguide.playbook.source import (
    WATCH_FILE,
    PlaybookError,
    check_fields,
    is_file,
    one_line,
    os_problem,
    playbook_dirs,
    read_playbook_file,
    shown,
    text_field,
    yaml_files,
)
from fieldguide.playbook.yamlread import LineDict

__all__ = ["PlaybookError", "find_playbook", "list_playbooks", "load_causes", "load_playbook", "playbook_dirs"]

NODE_FIELDS = {"id", "question", "why", "measure", "pass", "depart", "error", "share", "share_at"}
PLAYBOOK_FIELDS = {"id", "title", "purpose", "start", "nodes", "leaves", "prefetch", "arm", "budget", "ready_timeout",
                   "torch_trace", "include", "local", "order"}
INCLUDE_FIELDS = {"playbook", "nodes", "continue"}


# A playbook may include from one that includes from another: deeper than this is refused
# (the bundled ones include one level).
MAX_INCLUDE_DEPTH = 8
NOT_PLAYBOOKS = frozenset({CAUSES_FILE, WATCH_FILE})  # the other files of a playbook directory
# An id longer than this cannot name a playbook file (names are at most 255 bytes).
MAX_ID_CHARS = 200


def list_playbooks(problems: list[str] | None = None) -> list[Playbook]:
    """Every loadable playbook; a malformed one is skipped and its error appended to `problems`
    (or raised, when `problems` is None)."""
    seen: dict[str, Playbook] = {}
    for directory in playbook_dirs():
        for path in yaml_files(directory, problems):
            if path.name in NOT_PLAYBOOKS or path.stem in seen:
                continue
            try:
                seen[path.stem] = load_playbook(path)
            except PlaybookError as err:
                if problems is None:
                    raise
                problems.append(str(err))
    return sorted(seen.values(), key=lambda p: (p.order, p.id))


def find_playbook(playbook_id: str, *, trust_bundled: bool = False) -> Playbook:
    """A playbook by id, or by path to a .yaml file. A name the OS cannot take (too long, a NUL)
    is bad input like any other, not an OSError.

    `trust_bundled`: a playbook shipped with fieldguide is read without checking its probes
    against the registry, which imports every probe module (~100 ms on 2 cores) before a first
    screen that needs none of them; the test suite loads every bundled playbook with the check.
    A user's playbook is always checked."""
    if playbook_id.endswith((".yaml", ".yml")) or os.sep in playbook_id:
        path = Path(playbook_id)
        try:
            found = path.is_file()
        except (OSError, ValueError) as err:  # ENAMETOOLONG; a NUL
            why = os_problem(err) if isinstance(err, OSError) else str(err)
            raise BadInput(one_line(f"cannot read playbook file {shown(playbook_id)}: {why}")) from None
        if not found:
            there = os.path.lexists(path)  # a pipe, a device, a directory: there, but no file
            raise BadInput(one_line(f"{shown(playbook_id)} is not a regular file" if there
                                    else f"no playbook file {shown(playbook_id)}"))
        return load_playbook(path)
    if len(playbook_id) <= MAX_ID_CHARS and f"{playbook_id}.yaml" not in NOT_PLAYBOOKS:
        dirs = playbook_dirs()
        for directory in dirs:
            path = directory / f"{playbook_id}.yaml"
            if os.path.lexists(path):  # a directory or FIFO of that name is reported, as in the listing
                return load_playbook(path, check_probes=not (trust_bundled and directory == dirs[-1]))
    known = sorted({p.stem for d in playbook_dirs() for p in yaml_files(d) if p.name not in NOT_PLAYBOOKS})
    raise BadInput(one_line(f"unknown playbook {shown(repr(playbook_id))}; installed: {', '.join(known) or 'none'}"))


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
        try:  # a depart's reason may quote what was measured: "{seen}"
            template_fields(raw["stop"])
        except ValueError as err:
            raise PlaybookError(path, line, str(err), node=node, field=key) from None
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


def _check_probe(probe_id: Any, params: dict[str, Any], expectation: Expectation, item: LineDict, path: Path,
                 node: str, where: str) -> None:
    """The probe exists, takes these parameters with these types, and gives the values expected of it."""
    from fieldguide.probes import registry  # probe modules are light: heavy imports happen in run()

    probe_cls = registry.get(probe_id) if isinstance(probe_id, str) else None
    if probe_cls is None:
        raise PlaybookError(path, item.line_of("probe"), f"unknown probe {probe_id!r}; known: {', '.join(registry.ids())}",
                            node=node, field=f"{where}.probe")
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
    unknown = [n for n in expectation.names() if probe_cls.values and n not in probe_cls.values]
    if unknown:
        raise PlaybookError(path, item.line_of("expect"), f"probe {probe_id} measures no value {unknown[0]!r}; it gives: "
                            f"{', '.join(probe_cls.values)}", node=node, field=f"{where}.expect")


def _measure(raw: Any, data: LineDict, path: Path, node: str, check_probes: bool) -> tuple[MeasureOption, ...]:
    line = data.line_of("measure")
    if not isinstance(raw, list) or not raw:
        raise PlaybookError(path, line, "must be a non-empty list of {probe, params, expect}", node=node, field="measure")
    options = []
    for i, item in enumerate(raw):
        where = f"measure[{i}]"
        if not isinstance(item, LineDict):
            raise PlaybookError(path, line, "must be a mapping", node=node, field=where)
        check_fields(item, {"probe", "params", "expect"}, path, node)
        probe_id = item.get("probe")
        params = item.get("params") or {}
        if not isinstance(params, dict):
            raise PlaybookError(path, item.line_of("params"), "must be a mapping", node=node, field=f"{where}.params")
        try:
            expectation = parse_expectation(item.get("expect"), f"{where}.expect")
        except ExpectationSyntaxError as err:
            raise PlaybookError(path, item.line_of("expect"), str(err), node=node, field=err.field) from None
        if check_probes or not isinstance(probe_id, str):
            _check_probe(probe_id, params, expectation, item, path, node, where)
        options.append(MeasureOption(probe=str(probe_id), params=dict(params), expect=expectation))
    return tuple(options)


@dataclass
class _Including:
    """The playbooks being loaded, outermost first, for include loops; and those loaded, so that
    a playbook included many times is read once."""

    chain: list[Path] = field(default_factory=list)
    loaded: dict[Path, Playbook] = field(default_factory=dict)
    check_probes: bool = True  # each measure's probe, parameters and values against the registry


def load_playbook(path: Path, *, check_probes: bool = True) -> Playbook:
    """Read and validate one playbook file (and the playbooks it includes from)."""
    path = Path(path)
    try:
        return _load(path, _Including(check_probes=check_probes))
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError) as err:
        # A check this loader lacks, met by a hostile file: still one line naming the file.
        raise PlaybookError(path, 0, f"cannot be loaded as a playbook ({type(err).__name__}: {err})") from None


def _key(path: Path) -> Path:
    return Path(os.path.abspath(path))


def _load(path: Path, including: _Including) -> Playbook:
    key = _key(path)
    if key in including.loaded:
        return including.loaded[key]
    including.chain.append(key)
    try:
        playbook = _load_data(path, read_playbook_file(path), including)
    finally:
        including.chain.pop()
    including.loaded[key] = playbook
    return playbook


def _load_data(path: Path, data: Any, including: _Including) -> Playbook:
    if not isinstance(data, LineDict):
        raise PlaybookError(path, 1, "a playbook must be a mapping with id, title, purpose, start, nodes")
    check_fields(data, PLAYBOOK_FIELDS, path, None)
    playbook_id = text_field(data, "id", path, None)
    if not check_id(playbook_id):
        raise PlaybookError(path, data.line_of("id"), f"playbook id {shown(repr(playbook_id))} must be letters, "
                            "digits, '.', '_' and '-'", field="id")
    raw_nodes = data.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise PlaybookError(path, data.line_of("nodes"), "must be a non-empty list of nodes", field="nodes")
    nodes: dict[str, Node] = {}
    raw_by_id: dict[str, LineDict] = {}  # for the line of each edge, below
    for raw in raw_nodes:
        if not isinstance(raw, LineDict):
            raise PlaybookError(path, data.line_of("nodes"), "each node must be a mapping", field="nodes")
        node_id = raw.get("id")
        if not isinstance(node_id, str) or not node_id:
            raise PlaybookError(path, raw.line, "is missing", field="id")
        if not check_id(node_id):
            raise PlaybookError(path, raw.line, f"node id {shown(repr(node_id))} must be letters, digits, '.', '_' "
                                "and '-'", field="id")
        if node_id in nodes:
            raise PlaybookError(path, raw.line, "duplicate node id", node=node_id, field="id")
        check_fields(raw, NODE_FIELDS, path, node_id)
        raw_by_id[node_id] = raw
        for key in ("pass", "depart"):
            if key not in raw:
                raise PlaybookError(path, raw.line, "is missing: every node needs both a pass and a depart edge",
                                    node=node_id, field=key)
        nodes[node_id] = Node(
            id=node_id,
            question=text_field(raw, "question", path, node_id),
            why=text_field(raw, "why", path, node_id),
            measure=_measure(raw.get("measure"), raw, path, node_id, including.check_probes),
            on_pass=_edge(raw["pass"], "pass", raw, path, node_id),
            on_depart=_edge(raw["depart"], "depart", raw, path, node_id),
            on_error=_edge(raw["error"], "error", raw, path, node_id) if "error" in raw else None,
            line=raw.line,
            share=_value_name(raw, "share", path, node_id),
            share_at=_value_name(raw, "share_at", path, node_id),
        )
    includes = data.get("include") or []
    if not isinstance(includes, list):
        raise PlaybookError(path, data.line_of("include"), "must be a list of {playbook, nodes, continue}",
                            field="include")
    for spec in includes:
        for node_id, node in _included(spec, data, path, including).items():
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
            raw = raw_by_id.get(node.id)  # none for an included node: its own line
            line = raw.line_of(key) if raw is not None else node.line
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
    start = text_field(data, "start", path, None)
    if start not in nodes:
        raise PlaybookError(path, data.line_of("start"), f"unknown start node {start!r}", field="start")
    check_acyclic(nodes, start, path)
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
    local = data.get("local", False)
    if not isinstance(local, bool):
        raise PlaybookError(path, data.line_of("local"), "must be true or false", field="local")
    order = data.get("order", 100)
    if isinstance(order, bool) or not isinstance(order, int) or not 0 <= order <= 1000:
        raise PlaybookError(path, data.line_of("order"), "must be a whole number from 0 to 1000", field="order")
    return Playbook(
        id=playbook_id,
        title=text_field(data, "title", path, None),
        purpose=text_field(data, "purpose", path, None),
        start=start,
        nodes=nodes,
        causes={k: v for k, v in causes.items()},
        leaves={str(k): str(v) for k, v in leaves.items()},
        prefetch=prefetch,
        arm=tuple(arm),
        budget=seconds["budget"],
        ready_timeout=seconds["ready_timeout"],
        order=order,
        torch_trace=torch_trace,
        local=local,
        source=path,
    )


def _included(spec: Any, data: LineDict, path: Path, including: _Including) -> dict[str, Node]:
    """Nodes of another playbook, by reference: `include: [{playbook: ID, nodes: [...], continue:
    {a node (or leaf) of ID the included nodes lead to: this playbook's node (or leaf) instead}}]`.
    The definitions stay in one place; only where they lead changes."""
    line = data.line_of("include")
    if not isinstance(spec, LineDict):
        raise PlaybookError(path, line, "each include must be a mapping with playbook, nodes, continue", field="include")
    check_fields(spec, INCLUDE_FIELDS, path, None)
    other_id, wanted, leads = spec.get("playbook"), spec.get("nodes"), spec.get("continue") or {}
    if (not isinstance(other_id, str) or not isinstance(wanted, list) or not all(isinstance(n, str) for n in wanted)
            or not isinstance(leads, dict)):
        raise PlaybookError(path, spec.line, "include needs playbook (an id), nodes (a list of node ids) and "
                            "continue (a mapping)", field="include")
    # An id names a file beside this one: no path separators, no parent directories.
    plain = other_id and len(other_id) <= MAX_ID_CHARS and not other_id.startswith(".") and not (
        {"/", os.sep} & set(other_id))
    other_path = path.parent / f"{other_id}.yaml"
    if not plain or other_id == data.get("id") or not is_file(other_path):
        raise PlaybookError(path, spec.line, f"cannot include from {shown(repr(other_id))}: no such playbook "
                            "beside this one", field="include")
    # Loops and depth are checked here, where the include's line is known; never recursed into.
    if _key(other_path) in including.chain:
        loop = [p.stem for p in including.chain[including.chain.index(_key(other_path)):]] + [other_path.stem]
        raise PlaybookError(path, spec.line, f"include loop: {' -> '.join(loop)}", field="include")
    if len(including.chain) >= MAX_INCLUDE_DEPTH:
        raise PlaybookError(path, spec.line, f"includes nested more than {MAX_INCLUDE_DEPTH} playbooks deep: "
                            f"{' -> '.join(p.stem for p in including.chain)} -> {other_path.stem}", field="include")
    other = _load(other_path, including)
    found: dict[str, Node] = {}
    for node_id in wanted:
        if node_id not in other.nodes:
            raise PlaybookError(path, spec.line, f"{other_id} has no node {node_id!r}", field="include")
        node = other.nodes[node_id]
        edges = {}
        for key in ("on_pass", "on_depart", "on_error"):
            edge = getattr(node, key)
            if edge is not None and edge.kind in ("node", "leaf") and edge.target in leads:
                # here, not where the other playbook went: a node id, or {leaf: id} for one of this
                # playbook's healthy leaves
                lead = leads[edge.target]
                if isinstance(lead, dict) and set(lead) == {"leaf"} and isinstance(lead["leaf"], str):
                    edge = replace(edge, kind="leaf", target=lead["leaf"])
                else:
                    edge = replace(edge, target=str(lead))
            elif edge is not None and edge.kind == "node" and edge.target not in wanted:
                raise PlaybookError(path, spec.line, f"included node {node_id} leads to {other_id}'s "
                                    f"{edge.target}: say under `continue` where to go instead", field="include")
            edges[key] = edge
        found[node_id] = replace(node, **edges)
    return found


def _value_name(raw: LineDict, key: str, path: Path, node_id: str) -> str | None:
    """A node's `share`/`share_at`: the name of a value one of its probes measures."""
    if key not in raw:
        return None
    name = raw.get(key)
    if not isinstance(name, str) or not name.isidentifier():
        raise PlaybookError(path, raw.line_of(key), "must be the name of a measured value", node=node_id, field=key)
    return name


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

