"""Helpers for the TUI tests: waiting on the real app, a constructed process list, screen text."""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.pilot import Pilot

from fieldguide.frontends.tui.procscan import ProcInfo

FAKE_PROCS = [
    ProcInfo(pid=31337, user="ada", cpu_percent=97.0, rss_mib=2140.5,
             cmdline="python train.py --config configs/resnet50.yaml --epochs 90", torch_children=4),
    ProcInfo(pid=27182, user="ada", cpu_percent=3.0, rss_mib=812.0,
             cmdline="python -m torch.distributed.run --nproc-per-node 2 finetune.py", gpu_mb=10240),
    ProcInfo(pid=16180, user="grace", cpu_percent=0.0, rss_mib=451.2, cmdline="jupyter-kernel -f kernel-16180.json"),
]


class FakeScanner:
    """The picker's process scanner, with a fixed answer (the real one is tested on a real job)."""

    status = "NVML: 1 GPU(s)"

    def __init__(self, rows: list[ProcInfo] | None = None) -> None:
        self.rows = FAKE_PROCS if rows is None else rows
        self.calls = 0

    def __call__(self) -> list[ProcInfo]:
        self.calls += 1
        return list(self.rows)


async def wait_for(pilot: Pilot[object], predicate: Callable[[], object], timeout: float = 60.0,
                   what: str = "a condition", interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await pilot.pause(interval)
    await pilot.pause()  # let what it shows be laid out and drawn


def screen_text(pilot: Pilot[object]) -> str:
    """Everything on screen as plain text (via the exported screenshot's text)."""
    app = pilot.app
    lines = []
    for strip in app.screen._compositor.render_strips():
        lines.append("".join(seg.text for seg in strip))
    return "\n".join(lines)
