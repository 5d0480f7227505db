"""The watch's thresholds as data (playbooks/watch.yaml, or the same file in a directory of
$FIELDGUIDE_PLAYBOOKS): how long to warm up and learn, how wide a window, and each signal's
condition and the playbook that walks the job when it departs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fieldguide.playbook.source import (
    WATCH_FILE,
    PlaybookError,
    check_fields,
    playbook_dirs,
    read_playbook_file,
    text_field,
)
from fieldguide.playbook.yamlread import LineDict

SERIES = ("step_ms", "input_share", "memory_mb", "gpu_util", "sm_active", "gflops")
# Each signal has exactly one condition; its number's meaning is in watch.yaml's comments.
CONDITIONS = ("rise_ratio", "rise_points", "drop_points", "slope_mb_per_min")
KEEP_S = 600.0  # the recent points the watch keeps (store.py): no span may be longer
SPANS = ("learn_s", "window_s", "span_s")
_TOP = {"warmup_s", "learn_s", "window_s", "min_steps", "signals"}
_SIGNAL = {"id", "title", "series", "sustain_s", "playbook", "min_growth_mb", "span_s", "over_own_slope", *CONDITIONS}


@dataclass(frozen=True)
class Signal:
    id: str
    title: str
    series: str
    condition: str  # one of CONDITIONS
    threshold: float
    sustain_s: float
    playbook: str
    min_growth_mb: float = 0.0  # slope_mb_per_min: growth over span_s needed besides the slope
    span_s: float = 0.0  # slope_mb_per_min: the span the slope is fitted over
    over_own_slope: float = 0.0  # slope_mb_per_min: and by this share of the baseline's own slope

    def describe(self) -> str:
        """The condition in words, for the event and the dashboard."""
        if self.condition == "slope_mb_per_min":
            return (f"growth over the last {self.span_s:g} s ≥ {self.threshold:g} MB/min (and "
                    f"{self.over_own_slope:.0%} of its own) over the baseline's, ≥ {self.min_growth_mb:g} MB, "
                    f"rising in each quarter, held {self.sustain_s:g} s")
        return {
            "rise_ratio": f"window median ≥ {self.threshold:g}x the baseline",
            "rise_points": f"window median ≥ baseline + {self.threshold:g}",
            "drop_points": f"window median ≤ baseline − {self.threshold:g}",
        }[self.condition] + f", held {self.sustain_s:g} s"


@dataclass(frozen=True)
class WatchRules:
    warmup_s: float
    learn_s: float
    window_s: float
    min_steps: int
    signals: tuple[Signal, ...]
    path: Path | None = None


def rules_path() -> Path:
    """The first watch.yaml along the playbook directories (a user's before the bundled one)."""
    for directory in playbook_dirs():
        if (directory / WATCH_FILE).is_file():
            return directory / WATCH_FILE
    return playbook_dirs()[-1] / WATCH_FILE


def load_rules(path: Path | None = None) -> WatchRules:
    """The rules, checked: one line naming the file, line and field for anything wrong."""
    path = Path(path) if path is not None else rules_path()
    data = read_playbook_file(path)
    if not isinstance(data, LineDict):
        raise PlaybookError(path, 1, "watch rules must be a mapping with warmup_s, learn_s, window_s, min_steps, signals")
    check_fields(data, _TOP, path, None)
    numbers = {key: _seconds(data, key, path) for key in ("warmup_s", "learn_s", "window_s", "min_steps")}
    raw = data.get("signals")
    if not isinstance(raw, list) or not raw:
        raise PlaybookError(path, data.line_of("signals"), "must be a non-empty list of signals", field="signals")
    signals = tuple(_signal(item, data, path) for item in raw)
    ids = [s.id for s in signals]
    if len(set(ids)) != len(ids):
        raise PlaybookError(path, data.line_of("signals"), "signal ids must be unique", field="signals")
    return WatchRules(warmup_s=numbers["warmup_s"], learn_s=numbers["learn_s"], window_s=numbers["window_s"],
                      min_steps=int(numbers["min_steps"]), signals=signals, path=path)


# The largest number each field may hold and still let a watch depart: a threshold of 1e308 or
# a min_steps of 10^18 was taken without a word, and such a watch could never depart.
UPPER = {"warmup_s": KEEP_S, "sustain_s": KEEP_S, "min_steps": 100_000, "rise_ratio": 100.0,
         "rise_points": 100.0, "drop_points": 100.0, "slope_mb_per_min": 100_000.0, "min_growth_mb": 100_000.0,
         "over_own_slope": 100.0}


def _seconds(data: LineDict, key: str, path: Path, node: str | None = None) -> float:
    value = data.get(key)
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            pass
        else:  # YAML 1.1 reads `1e3` (no dot) as text
            raise PlaybookError(path, data.line_of(key), f"must be a number: YAML reads {value!r} as text (write "
                                "an exponent with a dot: 1.0e+3)", node=node, field=key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 or (
            value == 0 and key not in ("warmup_s", "min_growth_mb", "over_own_slope")):
        raise PlaybookError(path, data.line_of(key), "must be a positive number", node=node, field=key)
    if key in UPPER and value > UPPER[key]:
        raise PlaybookError(path, data.line_of(key), f"must be at most {UPPER[key]:g}: a watch could never depart "
                            "past it", node=node, field=key)
    if key in SPANS and value > KEEP_S:
        raise PlaybookError(path, data.line_of(key), f"must be at most {KEEP_S:.0f} s (the points the watch keeps)",
                            node=node, field=key)
    if key == "min_steps" and not float(value).is_integer():
        raise PlaybookError(path, data.line_of(key), "must be a whole number of steps", node=node, field=key)
    return float(value)


def _signal(item: Any, data: LineDict, path: Path) -> Signal:
    if not isinstance(item, LineDict):
        raise PlaybookError(path, data.line_of("signals"), "each signal must be a mapping", field="signals")
    signal_id = text_field(item, "id", path, None)
    check_fields(item, _SIGNAL, path, signal_id)
    series = text_field(item, "series", path, signal_id)
    if series not in SERIES:
        raise PlaybookError(path, item.line_of("series"), f"unknown series {series!r}; known: {', '.join(SERIES)}",
                            node=signal_id, field="series")
    conditions = [c for c in CONDITIONS if c in item]
    if len(conditions) != 1:
        raise PlaybookError(path, item.line, f"needs exactly one condition of {', '.join(CONDITIONS)}",
                            node=signal_id, field="condition")
    slope = conditions[0] == "slope_mb_per_min"
    if slope != (series == "memory_mb"):
        raise PlaybookError(path, item.line_of(conditions[0]), "memory_mb is judged by slope_mb_per_min, and "
                            "slope_mb_per_min judges memory_mb only", node=signal_id, field=conditions[0])
    if slope and "span_s" not in item:
        raise PlaybookError(path, item.line, "a slope_mb_per_min signal needs span_s (the span the slope is fitted "
                            "over)", node=signal_id, field="span_s")
    for key in ("span_s", "min_growth_mb", "over_own_slope"):
        if key in item and not slope:
            raise PlaybookError(path, item.line_of(key), f"{key} belongs to a slope_mb_per_min signal",
                                node=signal_id, field=key)
    if conditions[0] == "rise_ratio" and isinstance(item.get("rise_ratio"), (int, float)) and item["rise_ratio"] <= 1:
        raise PlaybookError(path, item.line_of("rise_ratio"), "must be above 1 (a ratio to the baseline)",
                            node=signal_id, field="rise_ratio")
    from fieldguide.playbook.loader import find_playbook

    playbook = text_field(item, "playbook", path, signal_id)
    find_playbook(playbook, trust_bundled=True)  # an unknown one fails here, not at the first departure
    return Signal(id=signal_id, title=text_field(item, "title", path, signal_id), series=series,
                  condition=conditions[0], threshold=_seconds(item, conditions[0], path, signal_id),
                  sustain_s=_seconds(item, "sustain_s", path, signal_id), playbook=playbook,
                  **{key: _seconds(item, key, path, signal_id) for key in ("min_growth_mb", "span_s", "over_own_slope")
                     if key in item})
