"""A headless walk says what it is doing while a probe measures: a live line on a terminal, a
plain line every few seconds off one."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

from rich.console import Console

from fieldguide.frontends.progress import WalkProgress


def session(current: str | None, path: list[str], steps: int | None = None) -> SimpleNamespace:
    """A walk at node `current` (whose probe has the node's name), past the nodes in `path`."""
    conn = SimpleNamespace(steps_total=steps) if steps is not None else None
    agent = SimpleNamespace(primary=lambda: conn)
    nodes = {n: SimpleNamespace(measure=[SimpleNamespace(probe=n)]) for n in [*path, current] if n}
    return SimpleNamespace(walk=SimpleNamespace(current=current, path=path), target=SimpleNamespace(agent=agent),
                           playbook=SimpleNamespace(nodes=nodes))


def test_the_line_names_the_node_its_probes_status_the_window_left_and_the_jobs_steps() -> None:
    progress = WalkProgress(Console(file=io.StringIO()), live=False)
    walk = session("compile.ab", ["target.trains"], steps=412)
    progress.line(walk)  # the node starts
    progress.offer({"probe": "compile.ab", "status": "A/B: round 3 of 5, eager arm", "elapsed": 12.0, "of": 30.0})
    line = progress.line(walk)
    assert line.startswith("compile.ab (0 s)") and "A/B: round 3 of 5, eager arm" in line
    assert "18 s left of its 30 s window" in line and line.endswith("job step 412")


def test_a_node_shows_its_own_probes_readings_only() -> None:
    progress = WalkProgress(Console(file=io.StringIO()), live=False)
    progress.offer({"probe": "b", "status": "b's window, started early"})
    progress.offer({"probe": "a", "status": "a measuring"})
    assert "a measuring" in progress.line(session("a", ["x"]))
    line = progress.line(session("b", ["x", "a"]))
    assert "a measuring" not in line and "b's window, started early" in line


def test_the_job_start_is_named_until_the_first_node() -> None:
    progress = WalkProgress(Console(file=io.StringIO()), live=False)
    assert progress.line(session("target.trains", [])).startswith("starting: waiting for the job's first training steps")


def test_off_a_terminal_a_plain_line_every_few_seconds() -> None:
    out = io.StringIO()
    progress = WalkProgress(Console(file=out, width=200), live=False, plain_every=0.05)
    walk = session("input.data-wait", ["target.trains"])
    progress.tick(walk)
    assert out.getvalue() == ""  # not at once: the node's own line comes when it ends
    time.sleep(0.06)
    progress.tick(walk)
    progress.tick(walk)  # too soon for another
    assert out.getvalue().count("  ... input.data-wait") == 1


def test_on_a_terminal_a_live_line_that_leaves_nothing_behind() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    progress = WalkProgress(console)
    progress.offer({"probe": "input.data-wait", "status": "timing steps"})
    progress.tick(session("input.data-wait", ["target.trains"]))
    time.sleep(0.3)
    progress.stop()
    assert "timing steps" not in out.getvalue().rsplit("\x1b[2K", 1)[-1]  # transient: erased at the end
    assert "input.data-wait" in out.getvalue()
