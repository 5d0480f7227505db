"""Fixtures for the unit tests: the real slow-training playbook and walks over constructed measurements."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fg_fakes import LAUNCH, FakeMeasure, healthy_values

from fieldguide.engine import Walk
from fieldguide.playbook import Playbook, find_playbook


@pytest.fixture(scope="session")
def slow_training() -> Playbook:
    return find_playbook("slow-training")


@pytest.fixture
def walk_with(slow_training: Playbook) -> Callable[..., tuple[Walk, FakeMeasure]]:
    """walk_with(overrides, caps=LAUNCH) -> (finished walk, fake). `overrides` update healthy_values()
    per probe (a dict merges into the probe's values; a Measurement replaces them)."""

    def run(overrides: dict[str, Any] | None = None, caps: frozenset[str] = LAUNCH,
            base: dict[str, Any] | None = None) -> tuple[Walk, FakeMeasure]:
        values: dict[str, Any] = healthy_values() if base is None else base
        for probe, spec in (overrides or {}).items():
            if isinstance(spec, dict) and isinstance(values.get(probe), dict):
                values[probe] = {**values[probe], **spec}
            else:
                values[probe] = spec
        fake = FakeMeasure(values)
        walk = Walk(slow_training, lambda: set(caps), fake)
        walk.run()
        return walk, fake

    return run
