"""Equivalence before speed, for try-the-fix: an arm's losses over the job's first steps against
the job's own (agent capability `losses`). A faster arm whose losses depart from the job's by more
than the experiment's stated tolerance computes something else: a regression, not a win.

The comparison means something only when both runs start from the same weights and batches: the
job seeds torch's generator (`torch.manual_seed`, which frameworks' seed_everything / set_seed
call). An unseeded job's two runs differ anyway, and the verdict says it cannot tell.
"""

from __future__ import annotations

import math
from typing import Any

from fieldguide.analysis.stats import median

# float32's tolerance, agent/inside/equivalence.py's TOLERANCE["float32"] (not imported: that module
# imports torch in a function, and the CLI never imports torch).
DEFAULT_RTOL = 1e-3
MIN_STEPS = 5  # fewer common steps than this compare nothing


def losses_of(conn: Any) -> dict[str, Any]:
    """What an arm's agent streamed: its first losses and where the job seeded torch (or None)."""
    if conn is None:
        return {"first": [], "seeded": None}
    seeded = list(conn.stream("losses", "seeded").items)
    return {"first": [float(v) for v in conn.stream("losses", "first").items], "seeded": seeded[0] if seeded else None}


def compare_losses(job: dict[str, Any], arm: dict[str, Any], rtol: float = DEFAULT_RTOL) -> dict[str, Any]:
    """{"equivalent": True | False | None, "steps", "max_rel", "at_step", "rtol", "text"}: the
    largest |arm - job| over the common first steps, relative to the job's |loss| at that step."""
    a, b = job.get("first") or [], arm.get("first") or []
    n = min(len(a), len(b))
    found: dict[str, Any] = {"equivalent": None, "steps": n, "rtol": rtol, "max_rel": None, "at_step": None}
    if job.get("seeded") is None:
        found["text"] = ("cannot tell: the job does not seed torch's generator (torch.manual_seed), so two runs "
                         "of it start from different weights and batches")
        return found
    if n < MIN_STEPS:
        found["text"] = f"cannot tell: {n} loss(es) in common, fewer than {MIN_STEPS}"
        return found
    rel = []
    for x, y in zip(a[:n], b[:n], strict=True):
        if math.isnan(x) and math.isnan(y):
            rel.append(0.0)
        elif not (math.isfinite(x) and math.isfinite(y)):
            rel.append(math.inf)
        else:
            rel.append(abs(y - x) / max(abs(x), 1e-12))
    worst = max(range(n), key=lambda i: rel[i])
    found.update(max_rel=rel[worst], median_rel=median(rel), at_step=worst + 1)
    found["equivalent"] = rel[worst] <= rtol
    if rel[worst] == 0:
        found["text"] = f"identical losses over the first {n} steps"
        return found
    shown = "not finite" if math.isinf(rel[worst]) else f"{rel[worst]:.1e}"
    found["text"] = (f"{'same' if found['equivalent'] else 'different'} losses over the first {n} steps: the "
                     f"largest relative difference {shown} (step {worst + 1}), tolerance {rtol:.0e}")
    return found
