"""Which statements of the training loop feed the step: a backward slice over the loop's source.

A sample of the training thread in a call the loop makes, outside forward, backward and the
update, is either the loop fetching what the step consumes (its next batch: input) or the loop's
own work beside the step (metrics, a gc.collect(), a callback): the step would run the same
without it. Stack samples cannot tell the two apart; the loop's source can. The statements the
step's own lines (those the forward, backward and update samples stand on) read from, and
transitively the statements those read from, feed the step. A call at any other line does not.

Names are dotted paths (`batch`, `self.model`): a statement that writes `self.log` does not feed a
step that reads `self.model`. A method call as a statement (`opt.zero_grad()`, `buf.append(x)`)
writes its receiver. A plain call's arguments are not taken as written: `log(loss.item())` would
otherwise feed every step that reads `loss`. Pure functions over source text.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


@dataclass
class _Statement:
    start: int
    end: int
    reads: set[str] = field(default_factory=set)
    writes: set[str] = field(default_factory=set)
    receiver: str | None = None  # the object a method-call statement changes (`buf` of `buf.append(x)`)
    returns: bool = False  # a return or yield: what the function hands back feeds the step


def _path(node: ast.AST) -> str | None:
    """`a.b.c` for an attribute chain on a name; a subscript's base (`batch[0]` is `batch`)."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts.clear()  # `x.y[i].z` is read and written as `x.y`
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        else:
            return None


def _reads(nodes: list[ast.AST]) -> set[str]:
    """The dotted paths an expression loads, the longest chain of each (`self.model(x)` reads
    `self.model` and `x`, not `self`)."""
    found: set[str] = set()
    for root in nodes:
        inner: set[int] = set()  # the names and attributes a longer chain holds
        for node in ast.walk(root):
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                inner.add(id(node.value))
        for node in ast.walk(root):
            if id(node) in inner or not isinstance(node, (ast.Attribute, ast.Name, ast.Subscript)):
                continue
            if isinstance(getattr(node, "ctx", None), ast.Load):
                path = _path(node)
                if path:
                    found.add(path)
    return found


def _targets(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(
                getattr(sub, "ctx", None), (ast.Store, ast.Del)):
            path = _path(sub)
            if path:
                found.add(path)
    return found


def _statement(node: ast.stmt) -> _Statement:
    """A statement's reads and writes; a compound statement's header only (its body is walked apart)."""
    end = node.end_lineno or node.lineno
    body = getattr(node, "body", None)
    compound = isinstance(body, list) and body and isinstance(body[0], ast.stmt)
    if compound:
        end = max(node.lineno, body[0].lineno - 1)  # type: ignore[index]
    st = _Statement(start=node.lineno, end=end)
    if isinstance(node, (ast.For, ast.AsyncFor)):
        st.reads, st.writes = _reads([node.iter]), _targets(node.target)
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        st.reads = _reads([item.context_expr for item in node.items])
        st.writes = set().union(*(_targets(i.optional_vars) for i in node.items if i.optional_vars)) \
            if any(i.optional_vars for i in node.items) else set()
    elif isinstance(node, (ast.While, ast.If)):
        st.reads = _reads([node.test])
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        value = node.value
        st.reads = _reads([value] if value is not None else [])
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            st.writes |= _targets(target)
            # The target's own loads (`x[i] = ...` reads `i`) are reads.
            st.reads |= {p for p in _reads([target]) if p not in st.writes}
        if isinstance(node, ast.AugAssign):
            st.reads |= st.writes
    elif isinstance(node, ast.Expr):
        st.reads = _reads([node.value])
        st.returns = isinstance(node.value, (ast.Yield, ast.YieldFrom))
        call = node.value.func if isinstance(node.value, ast.Call) else None
        if isinstance(call, ast.Attribute):  # `buf.append(x)`, `opt.zero_grad()`: the receiver changes
            st.receiver = _path(call.value)
    elif not compound:
        st.reads = _reads([node])
        st.returns = isinstance(node, ast.Return)
    return st


def _related(write: str, read: str) -> bool:
    """A write changes what a read sees: the same path, a part of it (`batch.x` of `batch`), or
    the object it is part of. A bare `self` read (a Lightning module calling itself) is the
    module, not every attribute the loop sets on it."""
    if write == read or read.startswith(write + "."):
        return True
    return read not in ("self", "cls") and write.startswith(read + ".")


def _function(tree: ast.AST, name: str, line: int) -> ast.AST | None:
    """The innermost function called `name` whose lines hold `line`; the module for `<module>`."""
    if name == "<module>":
        return tree
    short = name.rsplit(".", 1)[-1]
    best = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == short \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or node.lineno > best.lineno:
                best = node
    return best


class LoopFlow:
    """The statements of one loop function, and which of them feed the step."""

    def __init__(self, statements: list[_Statement], sink_lines: set[int], params: frozenset[str] | set[str] = frozenset(),
                 returns_feed: bool = True):
        self.statements = statements
        # A method call changes its receiver when the receiver is the function's own (a local, a
        # parameter, self): `torch.save(...)` or `gc.collect()` change no value the step reads.
        owned = set(params) | {w.split(".", 1)[0] for st in statements for w in st.writes}
        for st in statements:
            # `self.helper()` changes no value by itself: its receiver is the object, not a value.
            if st.receiver and st.receiver not in ("self", "cls") and st.receiver.split(".", 1)[0] in owned:
                st.writes.add(st.receiver)
        self.feeding: set[int] = set()  # statement start lines
        # The step's own lines, and what the function returns (a trainer's training_step hands
        # its loss to the framework, which runs the backward).
        sinks = [st for st in statements if (returns_feed and st.returns)
                 or any(st.start <= line <= st.end for line in sink_lines)]
        wanted: set[str] = set().union(*(st.reads for st in sinks)) if sinks else set()
        self.feeding = {st.start for st in sinks}
        changed = True
        while changed:  # a fixed point: a loop's later lines feed its next step
            changed = False
            for st in statements:
                if st.start in self.feeding or not st.writes:
                    continue
                if any(_related(w, r) for w in st.writes for r in wanted):
                    self.feeding.add(st.start)
                    wanted |= st.reads
                    changed = True

    update_spans: list[tuple[int, int]] = []

    def updates(self, line: int | None) -> bool:
        """The line is part of a hand-written update (a block that changes parameters by their grads)."""
        return line is not None and any(a <= line <= b for a, b in self.update_spans)

    def statement_at(self, line: int) -> _Statement | None:
        inside = [st for st in self.statements if st.start <= line <= st.end]
        return min(inside, key=lambda st: st.end - st.start) if inside else None

    def feeds(self, line: int | None) -> bool | None:
        """Whether the statement at `line` feeds the step; None when the line is not the loop's."""
        if line is None:
            return None
        st = self.statement_at(line)
        return None if st is None else st.start in self.feeding


def loop_flow(source: str, function: str, line: int, sink_lines: set[int], returns_feed: bool = True) -> LoopFlow | None:
    """The flow of the function `function` that holds `line` in `source`; None if it cannot be read.
    `returns_feed`: what the function returns feeds the step (a training_step whose loss a framework
    backpropagates), not where the function runs the backward itself (a loop returning its history)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    func = _function(tree, function, line)
    if func is None:
        return None
    body = func.body if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)) else []
    statements: list[_Statement] = []
    blocks: list[list[ast.stmt]] = [list(body)]
    todo: list[ast.stmt] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue  # a nested definition runs when called, not here
        statements.append(_statement(node))
        for name in ("body", "orelse", "finalbody"):
            inner = [s for s in getattr(node, name, None) or [] if isinstance(s, ast.stmt)]
            todo.extend(inner)
            blocks.append(inner)
        for handler in getattr(node, "handlers", None) or []:
            todo.extend(handler.body)
            blocks.append(list(handler.body))
    statements.sort(key=lambda st: st.start)
    params: set[str] = set()
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
    flow = LoopFlow(statements, sink_lines, params, returns_feed)
    flow.update_spans = _update_spans(blocks, sink_lines)
    return flow


def _update_spans(blocks: list[list[ast.stmt]], sink_lines: set[int]) -> list[tuple[int, int]]:
    """Line spans of hand-written updates: a block whose statements update in place (see `_is_update`),
    whole (with what it nests); in the block that holds the step's own lines, only the statements
    that do it (a loop body that also logs a gradient norm is not all update)."""
    spans: list[tuple[int, int]] = []
    for block in blocks:
        if not block or not _is_update(list(block)):
            continue
        first, last = block[0].lineno, max(s.end_lineno or s.lineno for s in block)
        if any(first <= line <= last for line in sink_lines):
            # Statements of it that update, those holding the step's lines excepted (their own
            # blocks are looked at apart): the loop itself is no update.
            spans.extend((s.lineno, s.end_lineno or s.lineno) for s in block if _is_update([s])
                         and not any(s.lineno <= line <= (s.end_lineno or s.lineno) for line in sink_lines))
        else:
            spans.append((first, last))
    return spans


def _is_update(nodes: list[ast.AST]) -> bool:
    """Code that reads `.grad` and changes something in place (`p.sub_(...)`, `p -= ...`,
    `p.data = ...`): a hand-written update. Reading gradients alone (a norm logged) is not one."""
    reads_grad = changes = False
    for root in nodes:
        for n in ast.walk(root):
            if isinstance(n, ast.Attribute) and n.attr == "grad":
                reads_grad = True
            elif isinstance(n, ast.AugAssign):
                changes = True
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_") \
                    and not n.func.attr.startswith("_"):
                changes = True
            elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "data"
                                                   for t in n.targets):
                changes = True
    return reads_grad and changes


def is_update_function(source: str, function: str, line: int) -> bool:
    """The function that holds `line` is a hand-written update (see `_is_update`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    func = _function(tree, function, line)
    return func is not None and _is_update([func])
