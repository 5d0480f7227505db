"""The GPU panel: a line per GPU in the picker and on the walk screen, from a constructed NVML,
polled again only after the last poll returned; hidden where NVML cannot be used."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from tui_helpers import FakeScanner, screen_text, wait_for

from fieldguide.frontends.tui.app import make_app
from fieldguide.frontends.tui.screens.picker import TargetPicker
from fieldguide.frontends.tui.widgets.gpu import GpuPanel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from nvml_fake import FakeGpu, fake_pynvml  # noqa: E402


def two_gpus() -> object:
    return fake_pynvml([
        FakeGpu(util=[(1, 97)], processes={4242: 20 * 2**30}, gpm={2: 8.0}, power_mw=650_000),
        FakeGpu(uuid="GPU-bbbb", util=[(1, 40)], reasons=0x4, sm_clock=990, power_mw=700_000),
    ])


async def test_the_picker_draws_a_line_per_gpu_with_util_sm_memory_power_and_throttling() -> None:
    app = make_app(scanner=FakeScanner())
    app.nvml_module = two_gpus()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "the picker")
        panel = app.screen.query_one("#picker-gpus", GpuPanel)
        await wait_for(pilot, lambda: panel.polls >= 2, 20, "two polls")
        text = screen_text(pilot)
        assert "GPU0  util  97%  SM   8%  mem 20.0/141G  650/700W  1980/1980MHz" in text
        assert "GPU1  util  40%  mem 0.0/141G  700/700W  990/1980MHz  ⚠ power cap" in text  # one line at 80
        await pilot.press("q")


async def test_without_nvml_the_panel_stays_hidden_and_stops_polling() -> None:
    app = make_app(scanner=FakeScanner())
    app.nvml_module = fake_pynvml([], init_error="NVML Shared Library Not Found")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "the picker")
        panel = app.screen.query_one("#picker-gpus", GpuPanel)
        await wait_for(pilot, lambda: panel.polls == 1, 20, "one poll")
        await pilot.pause(0.3)
        assert panel.polls == 1 and not panel.display
        assert panel.reason == "NVML unavailable: NVML Shared Library Not Found"
        await pilot.press("q")


async def test_a_slow_poll_is_never_overlapped_by_the_next() -> None:
    module = two_gpus()
    inside, overlaps = [0], [0]
    lock = threading.Lock()
    count = module.nvmlDeviceGetCount

    def slow_count() -> int:
        with lock:
            inside[0] += 1
            overlaps[0] = max(overlaps[0], inside[0])
        time.sleep(0.3)  # a driver call slower than the poll interval
        with lock:
            inside[0] -= 1
        return count()

    module.nvmlDeviceGetCount = slow_count
    app = make_app(scanner=FakeScanner())
    app.nvml_module = module
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, TargetPicker), 20, "the picker")
        panel = app.screen.query_one("#picker-gpus", GpuPanel)
        panel.interval = 0.01
        await wait_for(pilot, lambda: panel.polls >= 3, 20, "three polls")
        assert overlaps[0] == 1
        await pilot.press("q")


async def test_the_walk_screen_draws_the_gpus_under_the_walk() -> None:
    from tui_replay import replay_factory

    from fieldguide.frontends.tui.screens.departure import DepartureScreen
    from fieldguide.frontends.tui.screens.walk import WalkScreen

    app = make_app(cmd=["python", "loader_remote_reads.py"], playbook_id="slow-training",
                   session_factory=replay_factory())
    app.nvml_module = two_gpus()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
        await pilot.press("escape")  # back to the walk
        await wait_for(pilot, lambda: isinstance(app.screen, WalkScreen), 20, "the walk screen")
        panel = app.screen.query_one("#walk-gpus", GpuPanel)
        await wait_for(pilot, lambda: panel.polls >= 1 and panel.display, 20, "a poll")
        assert "GPU1  util  40%" in screen_text(pilot)
        await pilot.press("q")
