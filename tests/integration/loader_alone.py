"""A DataLoader's wait timed with no fieldguide in the process: the script runs under a plain
interpreter with one perf_counter pair around each `next()` of a DataLoader iterator (the same
call the agent times), and the waits are written out when the job ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PRELUDE = """
import atexit, json, os, runpy, sys, time
import torch.utils.data.dataloader as dl
waits = []
base = dl._BaseDataLoaderIter.__next__
def timed(it):
    t0 = time.perf_counter()
    try:
        return base(it)
    finally:
        waits.append(time.perf_counter() - t0)
dl._BaseDataLoaderIter.__next__ = timed
atexit.register(lambda: open(os.environ["LOADER_WAITS"], "w").write(json.dumps(waits)))
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(script))
runpy.run_path(script, run_name="__main__")
"""


def waits_alone(script: Path, seconds: float, out: Path, skip: int = 20) -> list[float]:
    """The script's DataLoader waits (seconds each, the first `skip` left out: the first batches
    and the workers' start), timed by the script's own process alone for `seconds`."""
    env = dict(os.environ, FIELDGUIDE_WORKLOAD_SECONDS=str(seconds), LOADER_WAITS=str(out))
    env.pop("FIELDGUIDE_OVERRIDES", None)
    done = subprocess.run([sys.executable, "-c", PRELUDE, str(script)], env=env, capture_output=True, text=True,
                          timeout=seconds + 120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(out.read_text())[skip:]
