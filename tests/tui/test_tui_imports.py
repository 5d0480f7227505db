"""The TUI process never imports torch (the probes read the job from outside or through the
agent inside it); heavy imports wait until they are needed. Checked in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def run_fresh(code: str, timeout: float = 120) -> dict[str, object]:
    script = textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          cwd=HERE)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_app_imports_neither_torch_nor_the_probes() -> None:
    out = run_fresh("""
        import json, sys
        import fieldguide.frontends.tui.app
        mods = set(sys.modules)
        print(json.dumps({"torch": "torch" in mods, "probes": "fieldguide.probes.stacks" in mods,
                          "pynvml": "pynvml" in mods}))
    """)
    assert out == {"torch": False, "probes": False, "pynvml": False}


def test_no_torch_after_mounting_the_picker_and_a_replayed_walk() -> None:
    out = run_fresh("""
        import asyncio, json, sys
        sys.path.insert(0, ".")
        from tui_helpers import wait_for
        from tui_replay import replay_factory
        from fieldguide.frontends.tui.app import make_app
        from fieldguide.frontends.tui.procscan import ProcessScanner
        from fieldguide.frontends.tui.screens.departure import DepartureScreen

        async def main():
            app = make_app(scanner=ProcessScanner())  # the real scanner, over this machine's processes
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: getattr(app.screen, "scans", 0) > 0, 30, "a scan")
            after_picker = "torch" in sys.modules
            app = make_app(cmd=["python", "x.py"], playbook_id="slow-training", session_factory=replay_factory())
            async with app.run_test(size=(80, 24)) as pilot:
                await wait_for(pilot, lambda: isinstance(app.screen, DepartureScreen), 30, "the departure")
            return after_picker, "torch" in sys.modules

        picker, walk = asyncio.run(main())
        print(json.dumps({"picker": picker, "walk": walk}))
    """)
    assert out == {"picker": False, "walk": False}


@pytest.mark.integration
def test_no_torch_while_walking_the_real_demo() -> None:
    out = run_fresh("""
        import asyncio, json, sys
        sys.path.insert(0, ".")
        from tui_helpers import wait_for
        from fieldguide.frontends.tui.app import make_app
        from fieldguide.frontends.tui.screens.walk import WalkScreen

        async def main():
            app = make_app(demo=True)
            try:
                async with app.run_test(size=(80, 24)) as pilot:
                    def probing():
                        s = app.screen
                        return isinstance(s, WalkScreen) and s.state.measuring == "input.worker-startup"
                    await wait_for(pilot, probing, 90, "a probe of the launched demo")
                    seen = "torch" in sys.modules
                    await pilot.press("q")
                    await wait_for(pilot, lambda: not app.is_running, 30, "exit")
            finally:
                app.close_targets()
            return seen

        print(json.dumps({"torch": asyncio.run(main())}))
    """)
    assert out == {"torch": False}
