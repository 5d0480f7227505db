"""`fieldguide calibrate`: measure what this machine does, once, so expectations can be
"close to what this machine does" and not only fixed thresholds.

Kept light: a walk imports `fieldguide.calibrate.cache` to read a calibration, and that must not
pull in rich's tables or the command. bench.py (torch) is never imported: it runs as a script.
"""

from __future__ import annotations


def calibrate_command(force: bool = False, show: bool = False, as_json: bool = False) -> int:
    from rich.console import Console

    from fieldguide.calibrate.command import calibrate, show_cached

    console = Console(highlight=False)
    console.width = min(console.width, 80)
    if show:
        return show_cached(as_json, console)
    return calibrate(force, as_json, console)
