"""The typed sections a report is made of: every document format (report/formats/) and the
terminal renderer draw a list of these, and none walks the findings itself. Text stays as it is
here; each format escapes it for its own syntax, once."""

from __future__ import annotations

from dataclasses import dataclass

from fieldguide.analysis.coldstart import ColdStart


@dataclass(frozen=True)
class Span:
    """A run of inline text: plain, `code`, or bold."""

    text: str
    style: str = ""  # "" | "code" | "bold"


def code(text: object) -> Span:
    return Span(str(text), "code")


@dataclass(frozen=True)
class Title:
    text: str


@dataclass(frozen=True)
class Facts:
    """Labelled lines under the title: the target, the environment, when."""

    items: tuple[tuple[str, tuple[Span, ...]], ...]


@dataclass(frozen=True)
class Verdict:
    verdict: str  # departure | clean | inconclusive
    text: str


@dataclass(frozen=True)
class Heading:
    level: int  # 2: a part of the report, 3: within one
    text: str


@dataclass(frozen=True)
class Paragraph:
    spans: tuple[Span, ...]
    kind: str = ""  # "" | "note" (quoted) | "error"


@dataclass(frozen=True)
class Cell:
    text: str
    code: bool = False
    status: str = ""  # a node status the cell shows: formats may colour it
    link: str = ""  # where the cell's text points (a file:// URI): formats that link, link it


def cells(*texts: object) -> tuple[Cell, ...]:
    """A row of plain cells, each text as it is."""
    return tuple(Cell(str(t)) for t in texts)


@dataclass(frozen=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class FixPage:
    """A cause's page: why it costs, the fix as steps (report/fixsteps.py), how to verify."""

    why: str
    fix: tuple[str, ...]
    verify: str


@dataclass(frozen=True)
class Figure:
    """A chart (inline SVG, report/charts.py): drawn by the formats that can show one."""

    caption: str
    svg: str


@dataclass(frozen=True)
class Preformatted:
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Timeline:
    """The job's start, phase by phase on one clock: a bar on a terminal, a table in a document.
    `node`: the node of the walk whose probe timed it, None where the walk timed its job's start
    on the side."""

    cold: ColdStart
    node: str | None = None


Section = Title | Facts | Verdict | Heading | Paragraph | Table | FixPage | Figure | Preformatted | Bullets | Timeline
