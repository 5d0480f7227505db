"""The report's pictures (report/charts.py): inline SVG that parses, draws what the findings
hold once each, escapes its text, needs no script, and survives empty, short, flat and NaN series."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from fieldguide.report import Findings, to_html, to_markdown
from fieldguide.report.charts import (
    MEMORY,
    Bar,
    Series,
    arm_bars,
    bar_chart,
    charts_for,
    evidence_series,
    line_chart,
    series_groups,
    timeline_chart,
)

NS = {"s": "http://www.w3.org/2000/svg"}
PHASES: list[dict[str, Any]] = [{"phase": "interpreter", "title": "Interpreter start", "start_s": 0.0, "seconds": 0.12},
          {"phase": "imports", "title": "import torch", "start_s": 0.12, "seconds": 2.3},
          {"phase": "data", "title": "Dataset <&> loader", "start_s": 2.42, "seconds": 1.1},
          {"phase": "first", "title": "First steps", "start_s": 3.52, "seconds": 6.28}]
SWEEP = {"cause": "input.waiting", "ran": True, "rounds": 3, "shape": "scales with workers", "verdict": "it helps",
         "arms": [{"arm": "as launched", "step_ms": 58.1, "step_ms_q1": 55.8, "step_ms_q3": 60.1, "steps": 144},
                  *({"arm": f"num_workers={w}", "setting": "num_workers", "value": w, "step_ms": 58.0 / (1 + w), "step_ms_q1": 50.0 / (1 + w),
                     "step_ms_q3": 64.0 / (1 + w), "steps": 150, "vs_a": 1 / (1 + w), "vs_a_min": 0.9 / (1 + w),
                     "vs_a_max": 1.1 / (1 + w)} for w in (4, 0, 2, 8, 1))]}
AB = {"cause": "host.debug_mode", "ran": True, "rounds": 3, "verdict": "anomaly=False helps",
      "arms": [{"arm": "as launched", "step_ms": 12.0, "step_ms_q1": 11.0, "step_ms_q3": 13.5, "steps": 40},
               {"arm": "anomaly=False", "step_ms": 7.5, "step_ms_q1": 7.0, "step_ms_q3": 8.0, "steps": 44,
                "vs_a": 0.62, "vs_a_min": 0.6, "vs_a_max": 0.65}]}


def findings(**fields: Any) -> Findings:
    base: dict[str, Any] = {"playbook": "slow-training", "playbook_title": "Slow training", "target": {},
                            "environment": {}, "verdict": "clean", "first_departure": None, "conclusion": None,
                            "conclusion_text": "", "path": []}
    return Findings(**{**base, **fields})


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML, or this raises
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("role") == "img"
    assert root.find("s:title", NS) is not None and root.find("s:title", NS).text  # type: ignore[union-attr]
    assert "<script" not in svg.lower() and "href" not in svg and "@import" not in svg
    return root


def points(root: ET.Element) -> int:
    lines = sum(len(p.get("points", "").split()) for p in root.iter("{http://www.w3.org/2000/svg}polyline")
                if p.get("class") != "sweep")
    return lines + len(list(root.iter("{http://www.w3.org/2000/svg}circle")))


def loop_evidence(steps: list[float], waits: list[float]) -> dict[str, Any]:
    return {"probe": "loop.steps", "provenance": "agent", "step_ms": steps, "data_wait_ms": waits, "values": {}}


# -- line charts ---------------------------------------------------------------------------------------

def test_a_series_draws_a_point_per_value_with_min_median_max_and_units() -> None:
    svg = line_chart("step time", [Series("step_ms", "ms", (10.0, 30.0, 20.0, 40.0, 50.0))])
    root = parse(svg)
    assert points(root) == 5
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "max 50 ms" in text and "median 30 ms" in text and "min 10 ms" in text and "step 0" in text


def test_missing_values_break_the_line_and_a_lone_value_is_a_dot() -> None:
    values = (1.0, 2.0, None, 4.0, float("nan"), 6.0, 7.0)
    root = parse(line_chart("gaps", [Series("x_ms", "ms", tuple(v if v == v else None for v in values))]))
    polylines = list(root.iter("{http://www.w3.org/2000/svg}polyline"))
    assert [len(p.get("points", "").split()) for p in polylines] == [2, 2]
    assert len(list(root.iter("{http://www.w3.org/2000/svg}circle"))) == 1  # the 4.0 between two gaps


@pytest.mark.parametrize("values", [(), (None, None), (5.0,), (3.0, 3.0, 3.0), (0.0, 0.0)],
                         ids=["empty", "all-missing", "one-point", "constant", "zeros"])
def test_short_flat_and_empty_series_still_draw(values: tuple[float | None, ...]) -> None:
    root = parse(line_chart("edge", [Series("step_ms", "ms", values)]))
    assert points(root) == sum(v is not None for v in values)
    assert "nan" not in ET.tostring(root, encoding="unicode").lower()


def test_text_is_escaped() -> None:
    svg = line_chart("a <b> & 'c'", [Series("wait_<x>_ms", "ms", (1.0, 2.0))])
    root = parse(svg)
    assert "<b>" not in svg and "&lt;b&gt;" in svg
    assert root.find("s:title", NS).text == "a <b> & 'c'"  # type: ignore[union-attr]
    svg = bar_chart("t", [Bar("as <launched>", 1.0, 0.5, 1.5), Bar("x & y", 2.0)])
    parse(svg)
    assert "as &lt;launched&gt;" in svg and "x &amp; y" in svg


# -- the series a report holds, each once -----------------------------------------------------------

def test_nodes_sharing_one_probe_run_give_one_chart() -> None:
    same = loop_evidence([50.0, 52.0, 55.0], [40.0, 41.0, 45.0])
    f = findings(evidence={"input.worker-startup": same, "input.data-wait": dict(same),
                           "input.producer": dict(same), "env.debug-flags": {"probe": "torch.flags", "state": {}}})
    groups = series_groups(f)
    assert len(groups) == 1
    assert [s.name for s in groups[0].series] == ["step_ms", "data_wait_ms"]  # one scale: the step and its wait
    assert groups[0].nodes == ("input.worker-startup", "input.data-wait", "input.producer")
    charts = charts_for(f)
    assert len(charts) == 1 and "step and data wait per step, ms" in charts[0][0]
    assert points(parse(charts[0][1])) == 6


def test_memory_per_step_from_the_agents_rows_and_from_outside_samples() -> None:
    mb = 2**20
    rows = [[10 + i, i * 0.1, (1000 + 3 * i) * mb, 0, None, None] for i in range(20)]
    cuda_rows = [[i, 0.0, 900 * mb, 0, (200 + i) * mb, 0] for i in range(5)]
    (inside,) = evidence_series({"probe": "memory.growth", "rows": rows})
    assert inside.name == MEMORY and inside.unit == "MB" and inside.values[:2] == (1000.0, 1003.0)
    assert inside.xs == tuple(float(10 + i) for i in range(20))  # x is the job's step number
    assert evidence_series({"probe": "memory.growth", "rows": cuda_rows})[0].values[0] == 200.0  # CUDA's, not RSS
    (outside,) = evidence_series({"probe": "memory.growth.outside", "rss": [2 * mb, 3 * mb], "gpu_used": []})
    assert outside.values == (2.0, 3.0) and outside.xs is None
    (killed,) = evidence_series({"probe": "memory.breakdown", "rss": [[0.0, 5 * mb, 7], [1.0, 6 * mb, 9]]})
    assert killed.values == (5.0, 6.0) and killed.xs == (7.0, 9.0)
    charts = charts_for(findings(evidence={"memory.growth": {"probe": "memory.growth", "rows": rows}}))
    assert len(charts) == 1 and charts[0][0].startswith("memory used per step, MB")
    assert points(parse(charts[0][1])) == 20


def test_series_of_the_nodes_asked_for_in_their_order_and_by_unit() -> None:
    cpu = {"probe": "process.cpu", "rss_mb": [100.0, 101.0], "main_cpu_cores": [0.9, 1.0],
           "worker_cpu_cores": [2.0, 2.1]}
    f = findings(evidence={"loop": loop_evidence([1.0, 2.0], [0.5, 0.5]), "cpu": cpu})
    groups = series_groups(f, ["cpu", "missing"])
    assert [[s.name for s in g.series] for g in groups] == [["rss_mb"], ["main_cpu_cores", "worker_cpu_cores"]]
    assert all(g.nodes == ("cpu",) for g in groups)
    assert [c.split(" (")[0] for c, _ in charts_for(f)] == ["step and data wait per step, ms", "rss per sample, MB",
                                                           "main cpu and worker cpu per sample, cores"]


def test_evidence_without_series_draws_nothing() -> None:
    f = findings(evidence={"a": {"probe": "loop.steps", "step_ms": [], "data_wait_ms": [None, "x", True]},
                           "b": {"probe": "no.such.probe", "step_ms": [1.0, 2.0]}, "c": "not a dict"})
    assert charts_for(f) == []


# -- tried fixes: before/after bars, the worker sweep -------------------------------------------------

def test_a_before_after_pair_is_two_bars_with_whiskers() -> None:
    (caption, svg), = charts_for(findings(experiments=[AB]))
    root = parse(svg)
    assert "before and after" in caption
    assert len(root.findall(".//s:g[@class='bar']", NS)) == 2
    assert len(root.findall(".//s:path[@class='whisker']", NS)) == 2
    heights = [float(r.get("height", 0)) for r in root.findall(".//s:g[@class='bar']/s:rect", NS)]
    assert heights[1] / heights[0] == pytest.approx(7.5 / 12.0, rel=0.01)


def test_a_whisker_that_does_not_contain_its_median_is_not_drawn() -> None:
    # A report from before the quartiles were of the turns' means: num_workers=8's single steps
    # (mostly 1 ms) had quartiles 0.6-1.3 ms under a median of 50 ms. No whisker, the bar stays.
    old = {**AB, "arms": [AB["arms"][0], {**AB["arms"][1], "step_ms": 50.35, "step_ms_q1": 0.64,
                                          "step_ms_q3": 1.31}]}
    bars = arm_bars(old)
    assert (bars[0].low, bars[0].high) == (11.0, 13.5) and (bars[1].value, bars[1].low, bars[1].high) == (
        50.35, None, None)
    (caption, svg), = charts_for(findings(experiments=[old]))
    assert len(parse(svg).findall(".//s:path[@class='whisker']", NS)) == 1
    assert "the median of the turns' mean step times" in caption


def test_a_worker_sweep_is_bars_by_worker_count_a_line_and_the_job_as_launched() -> None:
    (caption, svg), = charts_for(findings(experiments=[SWEEP]))
    root = parse(svg)
    assert "Worker sweep" in caption and "scales with workers" in caption
    bars = root.findall(".//s:g[@class='bar']", NS)
    assert len(bars) == 5
    labels = [b.findall("s:text", NS)[0].text for b in bars]
    assert labels == ["0", "1", "2", "4", "8"]  # sorted by worker count
    assert len(root.find(".//s:polyline[@class='sweep']", NS).get("points", "").split()) == 5  # type: ignore[union-attr]
    assert root.find(".//s:line[@class='reference']", NS) is not None


def test_experiments_that_did_not_run_or_timed_nothing_draw_nothing() -> None:
    empty = {"cause": "x", "ran": True, "arms": [{"arm": "as launched", "step_ms": None, "steps": 0}]}
    assert charts_for(findings(experiments=[{"cause": "memory.leak", "ran": False, "why": "fixed in code"},
                                            empty])) == []
    assert [b.x for b in arm_bars(SWEEP)] == [None, 4, 0, 2, 8, 1]
    parse(bar_chart("nothing", []))


# -- the cold start --------------------------------------------------------------------------------

def test_cold_start_segments_are_as_wide_as_their_seconds() -> None:
    f = findings(cold_start={"phases": PHASES, "total_s": 9.8, "steady_step": 12})
    (caption, svg), = charts_for(f)
    root = parse(svg)
    assert "9.8 s" in caption and "steady from step 12" in caption
    rects = root.findall(".//s:rect[@class='phase']", NS)
    assert len(rects) == 4
    widths = [float(r.get("width", 0)) for r in rects]
    for width, phase in zip(widths, PHASES, strict=True):
        assert width / widths[-1] == pytest.approx(phase["seconds"] / PHASES[-1]["seconds"], rel=0.01)
    starts = [float(r.get("x", 0)) for r in rects]
    assert starts == sorted(starts) and starts[1] + widths[1] == pytest.approx(starts[2], abs=0.02)  # consecutive
    assert "Dataset &lt;&amp;&gt; loader" in svg


def test_a_cold_start_without_phases_still_parses() -> None:
    parse(timeline_chart("none", []))
    parse(timeline_chart("bad", [{"title": "x", "seconds": float("nan")}, {"title": "y"}]))


# -- the HTML report -----------------------------------------------------------------------------------

def test_html_report_inlines_the_charts_and_markdown_is_unchanged() -> None:
    f = findings(evidence={"input.data-wait": loop_evidence([50.0, 52.0], [40.0, 41.0])}, experiments=[AB],
                 cold_start={"phases": PHASES, "total_s": 9.8, "steady_step": 12})
    page = to_html(f)
    assert page.count("<svg") == 3 and "<h2>Charts</h2>" in page and "<script" not in page
    for svg in re.findall(r"<svg.*?</svg>", page, re.S):
        parse(svg)
    assert "<svg" not in to_markdown(f)
    assert "<svg" not in to_html(findings())


def test_what_memory_holds_is_a_bar_per_part() -> None:
    values = {"oom": True, "activations_mb": 900.0, "optimizer_state_mb": 120.0, "parameters_mb": 60.0,
              "gradients_mb": 60.0, "other_mb": None, "limit": "cgroup memory.max", "limit_mb": 1024}
    (caption, svg), = charts_for(findings(evidence={"memory.peak": {"probe": "memory.breakdown", "values": values}}))
    assert caption.startswith("What memory holds at the out-of-memory error, MB (memory.peak:")
    assert "cgroup memory.max" in caption and "1024 MB" in caption
    root = parse(svg)
    assert len(root.findall(".//s:g[@class='bar']", NS)) == 4  # a part not measured draws no bar
