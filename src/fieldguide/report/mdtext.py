"""Text that the job controls (its command line, its output, its frames' names, its exception
messages) as Markdown that shows it as it is: no raw HTML gets through, no emphasis or link is
made of it (`DataLoader.__next__` is not a bold "next"), and no code span or fence it holds can
end the one it is shown in (CommonMark: a fence longer than any run of backticks inside)."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Characters that make Markdown inline markup: code, emphasis, strikethrough, links and images,
# and the backslash itself. `_` only where it can open or close emphasis (not inside a word).
_INLINE = re.compile(r"[\\`*~\[\]]|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")
# What makes a block where a line starts: a heading, a quote, a list item, a setext underline.
_BLOCK_START = re.compile(r"^([#>+\-=]|\d+[.)](?=\s|$))")
# Only a `<` before a letter, `/`, `!` or `?` opens raw HTML or an autolink (CommonMark), and
# only an `&` that spells an entity is one: `a < b` and `x & y` stay readable as they are.
_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)")
_ENTITIES = {"&": "&amp;", "<": "&lt;"}
_BACKTICKS = re.compile(r"`+")


def _one_line(text: str) -> str:
    return " ".join(str(text).splitlines())


def _no_html(text: str) -> str:
    return _HTML.sub(lambda m: _ENTITIES[m.group(0)], text)


def md_text(text: object) -> str:
    """`text` as literal Markdown on one line: what could open HTML as entities, markup
    characters backslash-escaped, line breaks as spaces, no indent (it would make a code block)."""
    line = _one_line(str(text)).strip()
    line = _INLINE.sub(lambda m: "".join("\\" + c for c in m.group(0)), line)
    return _BLOCK_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], _no_html(line))


def md_cell(text: object) -> str:
    """`md_text` for a table cell: `|` escaped too (GFM)."""
    return md_text(text).replace("|", "\\|")


def _longest_run(text: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def md_code(text: object, *, cell: bool = False) -> str:
    """`text` as a code span on one line, delimited by more backticks than any run inside it;
    `cell`: for a table cell (`|` escaped, which GFM undoes inside code). Empty text: ""."""
    line = _one_line(str(text))
    if not line:
        return ""
    ticks = "`" * (_longest_run(line) + 1)
    pad = " " if line[0] in "` " or line[-1] in "` " else ""
    span = f"{ticks}{pad}{line}{pad}{ticks}"
    return span.replace("|", "\\|") if cell else span


def md_fence(lines: Sequence[str], lang: str = "") -> list[str]:
    """A fenced code block of `lines`: its fence longer than any run of backticks inside, so that
    no line (a job printing three backticks) can close it."""
    body = [ln for line in lines for ln in (str(line).splitlines() or [""])]
    fence = "`" * max(3, _longest_run("\n".join(body)) + 1)
    return [fence + _one_line(lang).replace("`", ""), *body, fence]


def md_prose(line: str) -> str:
    """A line of Markdown that is meant as Markdown (a field-guide page's prose, which a saved
    report also carries), with no raw HTML: outside its code spans, what could open HTML becomes
    an entity; a code span (a backtick run closed by one as long) is left as it is."""
    out: list[str] = []
    done = 0
    runs = list(_BACKTICKS.finditer(line))
    i = 0
    while i < len(runs):
        opening = runs[i]
        closing = next((j for j in range(i + 1, len(runs)) if len(runs[j].group(0)) == len(opening.group(0))), None)
        if closing is None:  # an unclosed run is literal backticks
            i += 1
            continue
        out.append(_no_html(line[done:opening.start()]) + line[opening.start():runs[closing].end()])
        done = runs[closing].end()
        i = closing + 1
    out.append(_no_html(line[done:]))
    return "".join(out)
