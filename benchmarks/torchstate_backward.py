"""What the debug-switch reading at each backward costs, in microseconds a backward.

usage: python benchmarks/torchstate_backward.py [--rounds 31]

torchstate wraps torch.autograd.backward: each backward counts itself and reads
anomaly mode and the profiler as it begins. Timed two ways, round after round in alternating
order (this box drifts by tens of microseconds between back-to-back timings): the wrapper
alone around a base that does nothing, against that base called directly; and a tiny real
backward (a 64->64 linear layer, one fixed batch), through the wrapper and without it.
Printed: the median of the per-round differences, with quartiles.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from typing import Any

import torch

from fieldguide.agent.inside.capabilities.torchstate import TorchState

BLOCK = 2000


class Agent:
    capabilities: dict[str, Any] = {}

    def stream(self, *a: Any, **k: Any) -> list[Any]:
        return []

    def add_step_listener(self, c: Any) -> None:
        pass


def wrapped(base: Any) -> Any:
    """torchstate's wrapper around `base`, installed on a stand-in for torch.autograd."""
    state = TorchState(Agent())  # type: ignore[arg-type]
    state.start()
    fake = types.SimpleNamespace(is_anomaly_enabled=torch.is_anomaly_enabled, _C=torch._C,
                                 autograd=types.SimpleNamespace(backward=base))
    state.hook_backward(fake)  # type: ignore[arg-type]
    return fake.autograd.backward


def per_call_us(fn: Any, arg: Any) -> float:
    t0 = time.perf_counter()
    for _ in range(BLOCK):
        fn(arg)
    return (time.perf_counter() - t0) / BLOCK * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=31)
    args = ap.parse_args()
    torch.set_num_threads(1)

    def nothing(x: Any) -> None:
        return None

    layer = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)

    def real(base: Any) -> Any:
        def step(_: Any) -> None:
            base(layer(x).sum())
        return step

    pairs = {"wrapper alone": (nothing, wrapped(nothing)),
             "tiny backward": (real(torch.autograd.backward), real(wrapped(torch.autograd.backward)))}
    for name, (plain, hooked) in pairs.items():
        per_call_us(plain, None), per_call_us(hooked, None)  # warm up
        diffs, plains = [], []
        for r in range(args.rounds):
            order = (plain, hooked) if r % 2 else (hooked, plain)
            t = {fn: per_call_us(fn, None) for fn in order}
            diffs.append(t[hooked] - t[plain])
            plains.append(t[plain])
        q = statistics.quantiles(diffs, n=4)
        print(f"{name:14s} base {statistics.median(plains):8.2f} us; added {statistics.median(diffs):+.3f} us "
              f"a backward (quartiles {q[0]:+.3f} .. {q[2]:+.3f}) over {args.rounds} rounds of {BLOCK}")


if __name__ == "__main__":
    main()
