"""The one vocabulary of statuses and verdicts: their words, marks and styles. The TUI, the rich
summary and the Markdown/HTML exporters all read it, so a status looks the same everywhere.

Plain data (Rich style strings, no Rich import): the core may read it without a terminal.
"""

from __future__ import annotations

# A node's status in a walk (the report's `path[].status`), and the two states a node of a
# walk in progress has before it is judged.
PASS, DEPART, SKIP, ERROR = "pass", "depart", "skip", "error"
STATUSES = (PASS, DEPART, SKIP, ERROR)
WAITING, MEASURING = "waiting", "measuring"
STATES = (WAITING, MEASURING, *STATUSES)

# Each state has its own glyph, so it reads the same without colour (NO_COLOR, a Markdown file).
GLYPH = {WAITING: "·", MEASURING: "▸", PASS: "✓", DEPART: "✗", SKIP: "–", ERROR: "!"}
STYLE = {WAITING: "dim", MEASURING: "bold yellow", PASS: "green", DEPART: "bold red", SKIP: "dim italic",
         ERROR: "magenta"}
# The state as a short phrase ("✗ input.data-wait  departs").
WORD = {WAITING: "waiting", MEASURING: "measuring", PASS: "pass", DEPART: "departs", SKIP: "skipped",
        ERROR: "could not measure"}
# A status in a table of the path: glyph and word.
STATUS_MARK = {status: f"{GLYPH[status]} {status}" for status in STATUSES}

# Whether one value held its expectation: True, False, or None (could not be evaluated).
HELD_GLYPH = {True: "✓", False: "✗", None: "?"}
HELD_STYLE = {True: STYLE[PASS], False: STYLE[DEPART], None: STYLE[ERROR]}

# The walk's verdict (the report's `verdict`).
DEPARTURE, CLEAN, INCONCLUSIVE = "departure", "clean", "inconclusive"
VERDICTS = (DEPARTURE, CLEAN, INCONCLUSIVE)
VERDICT_TEXT = {DEPARTURE: "Departure found", CLEAN: "Clean: the walk reached a healthy leaf",
                INCONCLUSIVE: "Inconclusive: the walk could not measure what it needed"}
VERDICT_STYLE = {DEPARTURE: "red", CLEAN: "green", INCONCLUSIVE: "yellow"}

# What the user did in the TUI beyond the walk itself (the report's `reruns[].action`).
RERUN, JUMP, REMEASURE = "rerun", "jump", "remeasure"
ACTIONS = (RERUN, JUMP, REMEASURE)
ACTION_TEXT = {RERUN: "re-run", JUMP: "jump", REMEASURE: "re-measure"}


def status_mark(status: str) -> str:
    """`✓ pass`; an unknown status (a report from a newer fieldguide) is shown as it is."""
    return STATUS_MARK.get(status, status)


def status_style(status: str) -> str:
    return STYLE.get(status, "")


def verdict_text(verdict: str) -> str:
    return VERDICT_TEXT.get(verdict, verdict)
