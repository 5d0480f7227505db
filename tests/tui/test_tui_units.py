"""The TUI's plain parts: the playbook outline, sparklines, measured vs expected, the reading
pump that collapses bursts, the input that keeps keys in order, export path checks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.widgets import Input

from fieldguide.analysis.stats import median
from fieldguide.frontends.tui.driver import export_format
from fieldguide.frontends.tui.model import (
    bar,
    declared,
    measured_vs_expected,
    playbook_outline,
    reading_lines,
    series_lines,
    sparkline,
)
from fieldguide.frontends.tui.readings import ReadingPump
from fieldguide.frontends.tui.widgets.inputs import OrderedInput
from fieldguide.frontends.tui.widgets.live import LiveReadings
from fieldguide.measurement import Measurement
from fieldguide.playbook import find_playbook
from fieldguide.probes import registry
from fieldguide.probes.base import Probe, ProbeContext
from fieldguide.walk.engine import NodeResult


def flatten(items, depth=0):
    for item in items:
        yield depth, item.kind, item.id
        yield from flatten(item.children, depth + 1)


def test_outline_is_a_checklist_with_departures_nested() -> None:
    lines = list(flatten(playbook_outline(find_playbook("slow-training"))))
    top = [(kind, i) for depth, kind, i in lines if depth == 0]
    assert top == [("node", "target.trains"), ("node", "dist.ranks"), ("node", "dist.comm"), ("node", "env.debug-flags"), ("node", "input.worker-startup"),
                   ("node", "input.data-wait"), ("node", "host.blocking-io"), ("node", "host.loop-work"),
                   ("node", "host.overhead"), ("node", "device.efficiency"), ("node", "host.threads"),
                   ("leaf", "device.compute_bound")]
    assert (1, "cause", "host.debug_mode") in lines
    # input.data-wait departs into input.producer, which names one of two causes
    assert (1, "node", "input.producer") in lines
    assert (2, "cause", "input.cpu_bound") in lines and (1, "cause", "input.waiting") in lines
    every_node = {i for _, kind, i in lines if kind == "node"}
    assert every_node == set(find_playbook("slow-training").nodes)


def test_sparkline_and_bar_need_no_colour() -> None:
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7], 8) == "▁▂▃▄▅▆▇█"
    assert sparkline([5, 5, 5], 2) == "██"  # the last `width` values
    assert sparkline([1, 2], 2, top=4) == "▃▅"
    assert sparkline([], 5) == "" and sparkline([0, 0], 2) == "▁▁"
    assert bar(0.5, 10) == "█████░░░░░" and bar(2.0, 4) == "████"
    assert median([3, 1, 2]) == 2 and median([1, 2, 3, 4]) == 2.5 and median([]) is None


def test_measured_vs_expected_per_value() -> None:
    playbook = find_playbook("slow-training")
    node = playbook.nodes["input.data-wait"]
    m = Measurement("loop.steps", values={"data_wait_fraction": 0.93}, units={"data_wait_fraction": "fraction"})
    result = NodeResult(node="input.data-wait", status="depart", measured={"data_wait_fraction": 0.93},
                        probe="loop.steps", measurement=m)
    (row,) = measured_vs_expected(node, result)
    assert (row.name, row.measured, row.expected, row.held) == ("data_wait_fraction", "93%", "< 10%", False)
    flags = playbook.nodes["env.debug-flags"]
    m = Measurement("torch.flags", values={"anomaly_detection": True, "autograd_profiler": False,
                                           "sync_debug_on": False})
    rows = measured_vs_expected(flags, NodeResult(node=flags.id, status="depart", probe="torch.flags", measurement=m))
    by_name = {r.name: r for r in rows}
    assert by_name["anomaly_detection"].held is False and by_name["anomaly_detection"].measured == "yes"
    assert by_name["autograd_profiler"].held is True
    assert by_name["cuda_launch_blocking"].held is None  # not measured: shown as such, not invented


def test_reading_pump_collapses_a_burst_into_one_notification() -> None:
    notified = []
    pump = ReadingPump(lambda: notified.append(1))

    def burst() -> None:
        for i in range(2000):
            pump.offer({"probe": "loop.steps", "elapsed": i / 100, "of": 6.0})

    threads = [threading.Thread(target=burst) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(notified) == 1  # nothing was taken yet: one message queued, not 8000
    latest, _ = pump.take()
    assert latest["loop.steps"]["elapsed"] == pytest.approx(19.99)
    pump.offer({"probe": "stacks.sample", "status": "sampling"})
    assert len(notified) == 2
    pump.reset()
    assert pump.take()[0] == {}


def test_export_suffixes() -> None:
    assert export_format(Path("r.json")) == "json" and export_format(Path("r.md")) == "md"
    assert export_format(Path("r.HTML")) == "html"
    assert export_format(Path("r.txt")) is None


class InputApp(App[None]):
    def __init__(self, cls: type[Input]) -> None:
        super().__init__()
        self.cls = cls

    def compose(self) -> ComposeResult:
        yield self.cls("./fieldguide-report.json", id="path")


def burst(app: App[None], keys: list[str]) -> None:
    """Keys as a terminal delivers one read: all queued before any is handled."""
    for key in keys:
        char = key if len(key) == 1 else {"ctrl+u": "\x15", "backspace": "\x7f"}.get(key)
        app.post_message(events.Key(key, char))


@pytest.mark.parametrize("cls", [OrderedInput, pytest.param(Input, marks=pytest.mark.xfail(
    reason="the control: Textual's Input resolves ctrl+u after the burst's text went in", strict=True))])
async def test_ordered_input_keeps_editing_keys_in_order_with_text(cls: type[Input]) -> None:
    """`tmux send-keys C-u /tmp/x.md` arrives as one burst: the clear must come before the text.
    (Textual's own Input is the control: it resolves ctrl+u after the text has gone in.)"""
    app = InputApp(cls)
    async with app.run_test() as pilot:
        field = app.query_one(cls)
        field.cursor_position = len(field.value)
        burst(app, ["ctrl+u", *"/tmp/x.md"])
        await pilot.pause(0.2)
        assert field.value == "/tmp/x.md"
        burst(app, ["backspace", "backspace", *"html"])
        await pilot.pause(0.2)
        assert field.value == "/tmp/x.html"
        assert field.cursor_blink is False


def test_short_command_keeps_the_program_and_the_script_names() -> None:
    from fieldguide.frontends.tui.procscan import short_command

    assert short_command("/work/main/.venv/bin/python /work/main/src/fieldguide/workloads/loader_remote_reads.py "
                         "--lr 3e-4") == "python …/loader_remote_reads.py --lr 3e-4"
    assert short_command("python train.py") == "python train.py"


# -- live readings drawn from what the probe declares -----------------------------------------------

class DeclaringProbe(Probe):
    """A probe no playbook uses: the TUI must draw it from its declarations alone."""

    id = "test.declaring"
    title = "declares its series"
    values = {"queue_depth": "items", "hot": "fraction"}
    series = {"latency_us": "us", "stall_us": "us", "temp_c": "C"}

    def run(self, ctx: ProbeContext) -> Measurement:
        return self.measurement()


@pytest.fixture
def declaring() -> Iterator[type[Probe]]:
    """DeclaringProbe registered for this test only (the registry is process-wide)."""
    registry.ids()  # the built-ins first: teardown removes only this one
    registry.register(DeclaringProbe)
    yield DeclaringProbe
    registry._probes.pop(DeclaringProbe.id, None)  # no public unregister: probes live for a process


def test_declared_comes_from_the_registry(declaring) -> None:
    assert declared("test.declaring") == (DeclaringProbe.series, DeclaringProbe.values)
    assert declared("no.such.probe") == ({}, {}) and declared(None) == ({}, {})


def test_series_lines_pair_the_first_two_declared_on_one_scale(declaring) -> None:
    found = {"temp_c": [40.0, 80.0], "stall_us": [5.0, 5.0], "latency_us": [10.0, 10.0], "extra": [1.0, 2.0]}
    lines = series_lines(found, DeclaringProbe.series, 4)
    assert [line.label for line in lines] == ["latency us", "stall us", "temp c", "extra"]  # declared order first
    latency, stall, temp, extra = lines
    assert latency.drawing == "██" and stall.drawing == "▅▅"  # one scale: stall is half of latency
    assert latency.suffix == " 10 us median" and stall.suffix == " 5 us · 50% of latency"
    assert temp.drawing == "▅█" and temp.suffix == " 80 C"  # its own scale, its last value
    assert extra.suffix == " 2"  # undeclared: drawn, with no unit
    assert series_lines({"latency_us": []}, DeclaringProbe.series, 4) == []


def test_reading_lines_follow_probe_reading_shape(declaring) -> None:
    reading = {"probe": "test.declaring", "elapsed": 3.0, "of": 6.0,
               "series": {"stall_us": [1, 2], "latency_us": [2, 4]}, "values": {"queue_depth": 3, "hot": 0.5,
                                                                                 "gone": None}}
    lines, values = reading_lines(reading, 10)
    assert [line.label for line in lines] == ["progress", "latency us", "stall us"]
    assert lines[0].drawing == bar(0.5, 10) and lines[0].suffix == "  3.0/6 s"
    assert values == "queue depth 3 items · hot 50%"
    assert reading_lines({"probe": "test.declaring"}, 10) == ([], "")


async def test_live_panel_draws_any_probe_it_is_given(declaring) -> None:
    class LiveApp(App[None]):
        def compose(self) -> ComposeResult:
            yield LiveReadings(id="live")

    app = LiveApp()
    async with app.run_test(size=(90, 10)) as pilot:
        live = app.query_one(LiveReadings)
        live.update_readings({"test.declaring": {"probe": "test.declaring", "_seq": 1, "status": "sampling",
                                                  "series": {"latency_us": [10, 12], "stall_us": [5, 6]},
                                                  "values": {"queue_depth": 7}}})
        live.update_meter(50.0, 120.0, 2, 300.0)
        await pilot.pause()
        text = str(live.render())
        assert "probe test.declaring  sampling" in text
        assert "latency us" in text and "stall us" in text and "· 50% of latency" in text
        assert "queue depth 7 items" in text
        assert "CPU main" in text and "120% of 2 proc" in text


def test_the_tui_names_no_playbook_and_no_probe_value() -> None:
    """The TUI draws what probes declare: no playbook's or probe's names in its code."""
    import re
    from pathlib import Path

    import fieldguide.frontends.tui

    root = Path(fieldguide.frontends.tui.__file__).parent
    banned = re.compile(r"""["'](slow-training|step_ms|data_wait_ms|wait_ms|rss_mb|workers|producer|loop\.steps|"""
                        r"""process\.cpu|stacks\.sample)["']""")
    found = [f"{path.name}: {m.group(0)}" for path in root.rglob("*.py") for m in banned.finditer(path.read_text())]
    assert found == []


def test_parts_of_a_whole_are_bars_largest_first() -> None:
    from fieldguide.frontends.tui.model import declared_parts, part_bars

    names = declared_parts("memory.breakdown")
    assert "activations_share" in names and declared_parts("loop.steps") == ()
    bars = part_bars({"activations_share": 0.75, "parameters_share": 0.25, "other_share": 0.0,
                      "optimizer_state_share": None}, names, 20)
    assert bars == [("activations", "█" * 15, "75%"), ("parameters", "█" * 5, "25%"), ("other", "", "0%")]


def test_the_help_lists_every_key_of_every_screen() -> None:
    from fieldguide.frontends.tui.app import FieldguideApp
    from fieldguide.frontends.tui.screens.departure import DepartureScreen
    from fieldguide.frontends.tui.screens.help import KEYS
    from fieldguide.frontends.tui.screens.picker import TargetPicker
    from fieldguide.frontends.tui.screens.walk import WalkScreen
    from fieldguide.frontends.tui.screens.watch import EventScreen, WatchScreen
    from fieldguide.frontends.tui.watchapp import WatchApp

    listed = {title: {k.strip() for key, _ in keys for k in key.replace(" / ", ",").split(",")} for title, keys in KEYS}
    names = {"question_mark": "?", "escape": "esc", "ctrl+c": "ctrl+c"}
    for title, screen in (("Everywhere", FieldguideApp), ("Target picker", TargetPicker), ("Walk", WalkScreen),
                          ("Departure", DepartureScreen), ("Watch (fieldguide watch)", WatchScreen),
                          ("Watch (fieldguide watch)", EventScreen), ("Everywhere", WatchApp)):
        for binding in screen.BINDINGS:
            for key in binding.key.split(","):  # type: ignore[union-attr]
                assert names.get(key, key) in listed[title], (title, key)
