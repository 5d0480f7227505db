"""Terminal rendering of a calibration: a table, and bars drawn in text (no image viewer over SSH).

Every renderable fits 80 columns. Pure functions of a Calibration, so tests render constructed ones.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from fieldguide.calibrate.results import VALUES, Calibration, Point

EIGHTHS = " ▏▎▍▌▋▊▉"
SERIES_TITLES = {"loader.waiting": "DataLoader, waiting", "loader.cpu": "DataLoader, CPU work",
                 "cpu.matmul": "CPU matmul fp32", "cpu.matmul.fp64": "CPU matmul fp64", "gpu.matmul": "GPU matmul 4096", "gpu.h2d": "host→device copy",
                 "gpu.launch": "kernel launch", "gpu.sync": "cuda.synchronize"}


def number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def bar(value: float, top: float, width: int) -> str:
    """A horizontal bar `width` cells long at `top`, in eighths of a cell."""
    if top <= 0 or value <= 0:
        return ""
    eighths = round(min(value / top, 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (EIGHTHS[part] if part else "")


def _spread(p: Point) -> str:
    return f"{number(p.min)}–{number(p.max)}"


LABEL = 16  # "28.8 (28.5–28.8)"


def label(p: Point) -> str:
    return f"{number(p.median):>4} ({_spread(p)})"


def header(cal: Calibration) -> Text:
    quick = " · quick (fewer repeats)" if cal.identity.get("quick") else ""
    cores = cal.identity.get("cores")
    cpu = f" · {cores} cores" if cores else ""
    return Text.assemble(("Calibration ", "bold"), f"{cal.host} · {cal.device}{cpu} · torch {cal.torch}",
                         f"\n{cal.created[:19].replace('T', ' ')} UTC · measured in {cal.elapsed_s:.0f} s{quick}")


def loader_plot(cal: Calibration, bar_width: int = 16) -> RenderableType:
    """A row per worker count: the waiting and the CPU-work pipeline side by side, on one scale."""
    waiting = {p.x: p for p in cal.series("loader.waiting")}
    cpu = {p.x: p for p in cal.series("loader.cpu")}
    if not waiting and not cpu:
        return Text("DataLoader pipelines: not measured", style="dim")
    top = max(p.median for p in [*waiting.values(), *cpu.values()])
    sample = cal.identity.get("sample_ms", 4)
    batch = cal.identity.get("batch", 8)
    lines = Text(f"DataLoader batches/s, median (min–max); {sample:g} ms per sample, batch {batch}\n",
                 style="bold")
    width = bar_width + 1 + LABEL
    lines.append(f"{'workers':>7}  {'waiting (sleep)':<{width}} │ CPU work (busy loop)\n")

    def cell(p: Point | None, style: str) -> Text:
        if p is None:
            return Text(f"{'not measured':<{width}}", style="dim")
        drawn = bar(p.median, top, bar_width)
        return Text.assemble((f"{drawn:<{bar_width}}", style), f" {label(p):<{LABEL}}")

    for x in sorted(set(waiting) | set(cpu)):
        lines.append(f"{x:>7}  ")
        lines.append_text(cell(waiting.get(x), "cyan"))
        lines.append(" │ ")
        lines.append_text(cell(cpu.get(x), "magenta"))
        lines.append("\n")
    lines.rstrip()
    return lines


def bars_plot(title: str, points: list[Point], bar_width: int = 40) -> RenderableType:
    """One bar per point of a single series (matmul sizes, dtypes)."""
    lines = Text(title + "\n", style="bold")
    if not points:
        return lines
    top = max(p.median for p in points)
    for p in points:
        lines.append(f"{str(p.x):>7}  ")
        lines.append(f"{bar(p.median, top, bar_width):<{bar_width}}", style="green")
        lines.append(f" {label(p)}\n")
    lines.rstrip()
    return lines


def points_table(cal: Calibration) -> Table:
    table = Table(title="Measured (median of repeats, min–max)", title_justify="left", expand=False)
    for name, justify in (("measurement", "left"), ("at", "right"), ("median", "right"), ("min–max", "right"),
                          ("unit", "left")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for p in cal.points:
        table.add_row(SERIES_TITLES.get(p.series, p.series), str(p.x), number(p.median), _spread(p), p.unit)
    return table


def values_table(cal: Calibration) -> Table:
    table = Table(title="Values playbooks may refer to", title_justify="left",
                  caption=_missing_caption(cal), caption_justify="left")
    table.add_column("name")
    table.add_column("value", justify="right")
    table.add_column("what it is")
    for name, what in VALUES.items():
        value = cal.values.get(name)
        if value is None:
            shown = Text("—", style="dim")
        elif name.endswith("_workers"):
            shown = Text(f"{value:.0f}")
        else:
            shown = Text(number(value))
        table.add_row(name, shown, what)
    return table


def _missing_caption(cal: Calibration) -> str | None:
    """`—` explained: the names not measured, grouped by reason."""
    by_reason: dict[str, list[str]] = {}
    for name in VALUES:
        if cal.values.get(name) is None:
            by_reason.setdefault(cal.missing.get(name, "not measured"), []).append(name)
    if not by_reason:
        return None
    return "; ".join(f"— not measured ({reason}): {_names(names)}" for reason, names in by_reason.items())


def _names(names: list[str]) -> str:
    if len(names) > 2 and all(n.startswith("gpu_") for n in names):
        return f"the {len(names)} gpu_* values"
    return ", ".join(names)


def render(cal: Calibration) -> RenderableType:
    parts: list[Any] = [header(cal), Text(""), loader_plot(cal), Text("")]
    parts.append(bars_plot("CPU matmul float32, GFLOP/s by size", cal.series("cpu.matmul")))
    gpu = cal.series("gpu.matmul")
    if gpu:
        parts.append(bars_plot("GPU matmul 4096x4096, TFLOP/s by dtype", gpu))
    else:
        parts.append(Text(f"GPU: not measured ({cal.missing.get('gpu_launch_us', 'not measured')})", style="dim"))
    parts += [Text(""), points_table(cal), values_table(cal)]
    return Group(*parts)
