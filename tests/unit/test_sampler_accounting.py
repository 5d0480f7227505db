"""fieldguide's own CPU (`self_cpu_s`) counts its samplers, never the job it launched and reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fieldguide.host import samplers

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}:\n    pass\n"


def test_a_reaped_job_is_not_fieldguides_cpu_and_a_reaped_sampler_is() -> None:
    before = samplers.own_cpu_seconds()
    job = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.6)])
    job.wait()  # the launched job ends and is reaped the ordinary way
    after_job = samplers.own_cpu_seconds()
    assert after_job - before < 0.3  # os.times().children_* would have added the job's 0.6 s

    sampler = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.4)])
    assert samplers.wait(sampler, 30) == 0 and sampler.returncode == 0
    assert sampler.poll() == 0  # Popen knows it is reaped
    assert samplers.own_cpu_seconds() - after_job >= 0.35


def test_run_captures_output_and_status_and_times_out() -> None:
    done = samplers.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
                        timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with pytest.raises(subprocess.TimeoutExpired):
        samplers.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)


def test_stop_interrupts_then_reaps() -> None:
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], text=True) for _ in range(2)]
    samplers.stop(procs, grace=5)
    assert all(p.returncode is not None for p in procs)


FAKE_SPY = """#!/bin/sh
# records its command line where --output points, as py-spy would write its samples there
out=""
prev=""
for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done
echo "$@" > "$out"
"""


def test_a_rank_without_workers_is_sampled_without_polling_for_subprocesses(tmp_path: Path) -> None:
    from fieldguide.probes.dist import has_children
    from fieldguide.probes.stack_recording import record_stacks

    spy = tmp_path / "py-spy"
    spy.write_text(FAKE_SPY)
    spy.chmod(0o755)
    lone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                               "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                               "print(c.pid, flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    grandchild = 0
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())
        assert has_children(parent.pid) and not has_children(lone.pid)
        assert has_children(2 ** 22 + 7)  # unreadable (no such process): sampled with its subprocesses
        for with_workers in (True, False):
            texts, _, codes = record_stacks(str(spy), lone.pid, 1, 20, lambda timeout: False,
                                            subprocesses=with_workers)
            assert codes == {"all": 0, "active": 0}
            assert all(("--subprocesses" in text) is with_workers for text in texts.values())
            assert "--idle" in texts["all"] and "--idle" not in texts["active"]
    finally:
        for proc in (lone, parent):
            proc.kill()
            proc.wait()
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)
