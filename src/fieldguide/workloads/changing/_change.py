"""The moment a changing workload changes, shared by the scripts beside it (each runs as
`python path/to/script.py`, so this folder is on its sys.path): standard library only."""

import os
import time

CHANGE_AFTER_S = float(os.environ.get("FIELDGUIDE_CHANGE_AFTER_S", "90"))


def mark_change(step):
    """Say so on stdout, and write the wall-clock time where FIELDGUIDE_CHANGE_MARK says (a test's clock)."""
    print(f"fieldguide-zoo: changed at step {step}", flush=True)
    where = os.environ.get("FIELDGUIDE_CHANGE_MARK")
    if where:
        with open(where, "w") as out:
            out.write(f"{time.time():.3f}\n")
