"""A noisy leak (tens of MB/min under a floor that wobbles by tens of MB) is named or measured
longer, never read as 0 with no margin; a flat floor that wobbles does not depart (issue 32)."""

from __future__ import annotations

import random

from fieldguide.probes.memory import growth_values, kept_growth
from fieldguide.probes.memory_math import MB, growth, growth_margin, sustained_rate

THRESHOLD = 10.0  # the oom playbook's growth_mb_per_min and tensor_growth_mb_per_min


def per_min(rate: float) -> float:
    return rate * 60 / MB


def noisy_floor(seconds: int, leak_mb_per_min: float, wobble_mb: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [500 * MB + leak_mb_per_min / 60 * t * MB + rng.uniform(-wobble_mb, wobble_mb) * MB
            for t in range(seconds)]


def test_a_noisy_leak_reads_zero_but_its_margin_reaches_the_threshold() -> None:
    """60 MB/min under ±40 MB of wobble, 10 one-second floors: the rise is uneven and its lower
    bound is below 0 (the old rule read it 0 ± 0, clean). Its margin now reaches the threshold."""
    ts = [float(t) for t in range(10)]
    g = growth(ts, noisy_floor(10, 60.0, 40.0, seed=6))
    assert g is not None and not g.sustained
    assert g.slope - 2 * g.slope_se <= 0  # not demonstrably rising: the case the old rule zeroed
    assert growth_margin(g) > 0
    assert per_min((sustained_rate(g) or 0.0) + growth_margin(g)) >= THRESHOLD


def test_noisy_leaks_are_never_zero_with_no_margin() -> None:
    ts = [float(t) for t in range(10)]
    for seed in range(200):
        g = growth(ts, noisy_floor(10, 60.0, 40.0, seed))
        assert g is not None
        reach = per_min((sustained_rate(g) or 0.0) + growth_margin(g))
        if g.slope > 0:  # any rise at all is either read or covered by the margin
            assert reach >= per_min(g.slope), seed


def test_a_flat_wobbling_floor_does_not_depart_and_a_longer_window_settles_it() -> None:
    """A healthy floor wobbling by ±40 MB reads no growth: too close to call at worst over a
    short window; over a long one its margin falls under the threshold (judged flat)."""
    for seed in range(50):
        short = growth([float(t) for t in range(10)], noisy_floor(10, 0.0, 40.0, seed))
        assert short is not None and sustained_rate(short) == 0.0, seed
    long = growth([float(t) for t in range(300)], noisy_floor(300, 0.0, 40.0, seed=1))
    assert long is not None and sustained_rate(long) == 0.0
    assert per_min(growth_margin(long)) < THRESHOLD


def test_kept_tensors_that_grow_are_growth_with_their_own_scatter() -> None:
    """Launched: tensors kept across steps (by identity) at six checkpoints, 0.33 per step of
    varying shapes. No steady climb of the boundaries' memory is needed: they are the growth."""
    rng = random.Random(2)
    kept = [[1000.0 + 1.4 * i, 100 + 40 * i, 13 * i, int((1.0 * 1.4 * i + rng.uniform(-0.3, 0.3)) * MB)]
            for i in range(6)]
    rate, margin, how = kept_growth(kept, census_rate=0.0)
    assert 45 < rate < 75 and 0 < margin < rate - THRESHOLD and "checkpoints" in how


def test_a_launched_noisy_leak_departs_even_where_the_boundaries_wobble() -> None:
    rng = random.Random(5)
    rows = [[100 + i, 1000.0 + 0.04 * i, 300 * MB + rng.randint(-40, 40) * MB, 900 * MB, None, None]
            for i in range(200)]
    reply = {"rows": rows,
             "census": [{"tensors": 29, "bytes": 20 * MB, "graph_nodes": 13},
                        {"tensors": 95, "bytes": 28 * MB, "graph_nodes": 13}],
             "growing": [{"what": "1x33x256 float32 on cpu", "added": 1, "added_bytes": 33 * 1024, "count": 1}],
             "kept_by": {},
             "kept": [[1000.0 + 1.33 * i, 100 + 33 * i, 11 * i, int(i * 1.33 * MB)] for i in range(6)]}
    values, _, margins = growth_values(reply)
    assert values["growth_mb_per_min"] == 0.0  # the boundaries' memory does not climb steadily
    assert values["tensors_kept_per_step"] < 0.5
    assert values["tensor_growth_mb_per_min"] > THRESHOLD + margins["tensor_growth_mb_per_min"]


def test_the_agent_counts_tensors_kept_across_checkpoints_by_identity() -> None:
    import torch

    from fieldguide.agent.inside import memread

    first = memread.refs(torch)
    kept: list[torch.Tensor] = []
    last: dict = {}
    points = []
    for _checkpoint in range(4):
        for length in (10, 37, 64):  # a batch in flight, and a slice of it kept, every step
            batch = torch.zeros(8, length, 256)
            kept.append(batch[0].clone())
        count, nbytes, last = memread.kept_since(torch, first, last)
        points.append((count, nbytes))
    del batch
    assert points[0] == (0, 0)  # nothing was alive at a previous checkpoint yet
    per_checkpoint = (10 + 37 + 64) * 256 * 4
    assert [b for _, b in points[1:]] == [per_checkpoint * k for k in (1, 2, 3)]
