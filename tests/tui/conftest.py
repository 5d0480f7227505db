"""Fixtures shared by the TUI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fieldguide.frontends.tui.app import FieldguideApp


@pytest.fixture
def apps() -> Iterator[list[FieldguideApp]]:
    """Apps made by a test; whatever happens, their launched jobs are ended afterwards."""
    made: list[FieldguideApp] = []
    yield made
    for app in made:
        app.close_targets()
