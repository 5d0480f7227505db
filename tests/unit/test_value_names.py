"""A value name means one thing: no two registered probes declare it with different units.

Two probes may measure one quantity two ways (loop.steps and stacks.sample both give
data_wait_fraction; a playbook node lists them as alternatives), but then in one unit.
"""

from __future__ import annotations

from collections import defaultdict

from fieldguide.probes import registry


def declared_units() -> dict[str, dict[str, set[str]]]:
    """value name -> unit -> the probes that declare it so (values and live series alike)."""
    units: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for pid in registry.ids():
        cls = registry.get(pid)
        assert cls is not None
        for name, unit in {**cls.values, **cls.series}.items():
            units[name][unit].add(pid)
    return units


def clashes(units: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, set[str]]]:
    return {name: dict(by_unit) for name, by_unit in units.items() if len(by_unit) > 1}


def test_no_value_name_has_two_units_across_probes() -> None:
    found = clashes(declared_units())
    assert not found, "value names declared with different units: " + "; ".join(
        f"{name}: " + ", ".join(f"{unit or '(none)'} in {sorted(p)}" for unit, p in by_unit.items())
        for name, by_unit in found.items())


def test_the_check_catches_a_clash() -> None:
    units = declared_units()
    units["worker_busy_fraction"]["fraction"].add("stacks.sample")
    units["worker_busy_fraction"]["cores"].add("process.cpu")
    assert "worker_busy_fraction" in clashes(units)


def test_the_old_clashing_names_are_gone() -> None:
    """cpu_cores, worker_busy_fraction and workers once meant different things in different probes."""
    units = declared_units()
    assert set(units["cpu_cores"]) <= {""} and len(units["cpu_cores"][""]) <= 1
    assert "worker_busy_fraction" not in units and "workers" not in units


def test_measuring_one_quantity_two_ways_is_allowed_in_one_unit() -> None:
    units = declared_units()
    for name in ("data_wait_fraction", "startup_wait_fraction"):
        assert set(units[name]) == {"fraction"}
        assert {"loop.steps", "stacks.sample"} <= units[name]["fraction"]
