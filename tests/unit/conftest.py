"""Fixtures for the unit tests: a small playbook of the tests' own and the real slow-training one, and
walks over constructed measurements."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fg_fakes import LAUNCH, SMALL_PLAYBOOK, FakeMeasure, healthy_values

from fieldguide.playbook import Playbook, find_playbook, load_playbook
from fieldguide.probes import registry
from fieldguide.probes.base import Probe
from fieldguide.walk.engine import Walk


@pytest.fixture(scope="session")
def slow_training() -> Playbook:
    return find_playbook("slow-training")


@pytest.fixture(scope="session")
def small_playbook(tmp_path_factory: pytest.TempPathFactory) -> Playbook:
    path = tmp_path_factory.mktemp("playbooks") / "small.yaml"
    path.write_text(SMALL_PLAYBOOK, encoding="utf-8")
    return load_playbook(path)


def _walker(playbook: Playbook) -> Callable[..., tuple[Walk, FakeMeasure]]:
    def run(overrides: dict[str, Any] | None = None, caps: frozenset[str] = LAUNCH,
            base: dict[str, Any] | None = None) -> tuple[Walk, FakeMeasure]:
        values: dict[str, Any] = healthy_values() if base is None else base
        for probe, spec in (overrides or {}).items():
            if isinstance(spec, dict) and isinstance(values.get(probe), dict):
                values[probe] = {**values[probe], **spec}
            else:
                values[probe] = spec
        fake = FakeMeasure(values)
        walk = Walk(playbook, lambda: set(caps), fake)
        walk.run()
        return walk, fake

    return run


@pytest.fixture
def walk_with(slow_training: Playbook) -> Callable[..., tuple[Walk, FakeMeasure]]:
    """walk_with(overrides, caps=LAUNCH) -> (finished walk, fake) over slow-training. `overrides`
    update healthy_values() per probe (a dict merges into the probe's values; a Measurement
    replaces them)."""
    return _walker(slow_training)


@pytest.fixture
def small_walk_with(small_playbook: Playbook) -> Callable[..., tuple[Walk, FakeMeasure]]:
    """walk_with over the small playbook (fg_fakes.SMALL_PLAYBOOK): for tests of what a walk's
    findings become, not of what a shipped playbook asks."""
    return _walker(small_playbook)


@pytest.fixture
def temp_probes() -> Iterator[Callable[[type[Probe]], type[Probe]]]:
    """`register(cls)` for this test only: what it registers is removed when the test ends.

    Tests must not leave probes in the process-wide registry: a class defined inside a test
    is a new class on every run, and the registry refuses a second class under an id, so a
    second in-process run (pytest.main twice, an IDE re-run) would fail."""
    registry.ids()  # the built-ins are loaded first: teardown removes only what the test added
    added: list[str] = []

    def register(cls: type[Probe]) -> type[Probe]:
        if registry.get(cls.id) is None:
            added.append(cls.id)
        return registry.register(cls)

    yield register
    for probe_id in added:
        # The registry has no public unregister (probes are registered for a process's life).
        registry._probes.pop(probe_id, None)
