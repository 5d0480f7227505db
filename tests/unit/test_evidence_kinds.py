"""Evidence kinds are declared seams: probes leave only what they declare, a report shows each
shown kind through exactly one renderer, and a new kind with its renderer reaches every format."""

from __future__ import annotations

from typing import Any

import pytest

from fieldguide.probes import evidence as ev
from fieldguide.probes import registry
from fieldguide.probes.base import Probe
from fieldguide.report import evidence_sections
from fieldguide.report.findings import Findings
from fieldguide.report.render import to_html, to_markdown
from fieldguide.report.section_types import Paragraph, Section, Span


def test_every_probe_declares_kinds_that_exist() -> None:
    for probe_id in registry.ids():
        cls = registry.get(probe_id)
        assert cls is not None
        for kind in cls.evidence_kinds:
            assert ev.KINDS.get(kind.key) is kind, f"{probe_id} declares {kind.key}, which evidence.py does not"


def test_every_shown_kind_has_exactly_one_renderer_and_no_hidden_kind_has_one() -> None:
    rendered = [kind.key for r in evidence_sections.RENDERERS for kind in r.kinds]
    assert len(rendered) == len(set(rendered)), rendered
    shown = {key for key, kind in ev.KINDS.items() if kind.shown}
    assert set(rendered) == shown


class _Leaves(Probe):
    id = "test.leaves"
    title = "leaves evidence"
    evidence_kinds = (ev.TABLE,)


def test_a_probe_that_leaves_an_undeclared_kind_fails_loudly() -> None:
    assert _Leaves().measurement(values={}, evidence={"table": [{"a": 1}]}).evidence == {"table": [{"a": 1}]}
    with pytest.raises(TypeError, match="top_stacks"):
        _Leaves().measurement(values={}, evidence={"table": [], "top_stacks": []})


def test_kind_of_reads_one_nodes_evidence_and_treats_empty_as_absent() -> None:
    assert ev.TORCH_TRACE.of({"torch_trace": "/tmp/t"}) == "/tmp/t"
    assert ev.TABLE.of({"table": []}) is None
    assert ev.TABLE.of(None) is None
    assert ev.TABLE.of({"other": 1}) is None


def _findings(evidence: dict[str, Any]) -> Findings:
    return Findings(playbook="p", playbook_title="P", target={"kind": "launch", "pid": 1, "cmdline": ["x"]},
                    environment={}, verdict="clean", first_departure=None, conclusion="fine", conclusion_text="ok",
                    path=[{"node": "n", "status": "pass", "measured": {}, "expected": "", "note": "", "probe": "q",
                           "seconds": 0.1}], evidence={"n": evidence})


def test_a_new_kind_is_its_declaration_and_one_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    kind: ev.EvidenceKind[str] = ev.EvidenceKind("weather", "the weather in the machine room", shown=True)
    monkeypatch.setitem(ev.KINDS, kind.key, kind)
    monkeypatch.setattr(evidence_sections, "RENDERERS", list(evidence_sections.RENDERERS))

    @evidence_sections.renders(kind, place=evidence_sections.APPENDIX)
    def weather(f: Findings) -> list[Section]:
        said = f.first_of(kind)
        return [Paragraph((Span(f"Weather: {said}"),))] if said else []

    findings = _findings({"probe": "q", "weather": "stormy_*now*"})
    assert "Weather: stormy\\_\\*now\\*" in to_markdown(findings)  # escaped once, by the format
    assert "Weather: stormy_*now*" in to_html(findings)
    assert "Weather" not in to_markdown(_findings({"probe": "q"}))


def test_worker_stacks_show_their_sample_counts_not_a_share() -> None:
    findings = _findings({"probe": "stacks.sample",
                          "top_worker_stacks": [{"samples": 12, "category": "decode", "stack": "f (a.py:1)"}]})
    text = to_markdown(findings)
    assert "Top stacks (DataLoader workers)" in text and "12 samples" in text


def _literal_evidence_keys() -> set[tuple[str, str]]:
    """Every key written literally as a probe's evidence in probes/: `evidence={...}`,
    `evidence = {...}` and `evidence["key"] = ...` (what a walk on a machine like this one may
    never reach: a GPU branch, an attach path)."""
    import ast
    from pathlib import Path

    import fieldguide.probes

    found: set[tuple[str, str]] = set()
    for path in Path(fieldguide.probes.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            literal = None
            if isinstance(node, ast.keyword) and node.arg == "evidence" and isinstance(node.value, ast.Dict):
                literal = node.value
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                    isinstance(t, ast.Name) and t.id == "evidence" for t in node.targets):
                literal = node.value
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "evidence"
                            and isinstance(t.slice, ast.Constant)):
                        found.add((path.name, str(t.slice.value)))
            if literal is not None:
                found |= {(path.name, str(k.value)) for k in literal.keys if isinstance(k, ast.Constant)}
    return found


def test_every_literal_evidence_key_in_the_probes_is_a_declared_kind() -> None:
    keys = _literal_evidence_keys()
    assert len(keys) > 30  # the scan sees the probes' evidence at all
    assert sorted((f, k) for f, k in keys if k not in ev.KINDS) == []
