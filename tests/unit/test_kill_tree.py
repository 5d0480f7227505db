"""A started job is ended with everything under it, a child in a session of its own included (as
torchrun starts its ranks): none is left running under the tests that come after."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from fieldguide.host.kill import kill_tree

LAUNCHER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print("started", flush=True)
time.sleep(60)
"""


def test_a_child_in_its_own_session_goes_with_its_launcher() -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
    assert launcher.stdout is not None and launcher.stdout.readline().strip() == "started"
    [child] = psutil.Process(launcher.pid).children(recursive=True)
    assert os.getsid(child.pid) != os.getsid(launcher.pid)  # out of reach of the launcher's group
    kill_tree(launcher)
    time.sleep(0.1)
    assert launcher.returncode is not None and not child.is_running()
