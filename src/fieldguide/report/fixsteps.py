"""The one renderer of a cause's field-guide page: why it costs, the fix steps (prose and
``` code fences), how to verify. The Markdown report, the HTML report, the rich summary and the
TUI's departure screen all draw fix steps through here, so a step reads the same everywhere."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fieldguide.report.mdtext import md_fence, md_prose

# The page's sections, in order.
WHY, FIX, VERIFY = "Why it costs", "Fix", "Verify"
INDENT = "   "  # a numbered item's continuation lines: under the text after "1. "


@dataclass(frozen=True)
class Block:
    """A run of prose lines, or one fenced code block (`lang` from its opening fence)."""

    lines: tuple[str, ...]
    code: bool = False
    lang: str = ""


def parse_step(text: str) -> list[Block]:
    """A fix step as blocks; an unclosed fence runs to the end of the step."""
    blocks: list[Block] = []
    lines: list[str] = []
    fence: str | None = None  # the open fence's language; None outside code
    for line in text.strip().splitlines():
        if line.strip().startswith("```"):
            if fence is None:
                if any(ln.strip() for ln in lines):
                    blocks.append(Block(tuple(lines)))
                lines, fence = [], line.strip()[3:].strip()
            else:
                blocks.append(Block(tuple(lines), code=True, lang=fence))
                lines, fence = [], None
            continue
        lines.append(line)
    if fence is not None:
        blocks.append(Block(tuple(lines), code=True, lang=fence))
    elif any(ln.strip() for ln in lines):
        blocks.append(Block(tuple(lines)))
    return blocks


def _block_markdown(block: Block) -> list[str]:
    # A saved report carries its cause's page: read back, it is no more trusted than the job, so
    # no raw HTML in the prose, and a fence that no line inside can close.
    if block.code:
        return md_fence(block.lines, block.lang)
    return [md_prose(line) for line in block.lines]


def steps_markdown(steps: Sequence[str]) -> list[str]:
    """The steps as a numbered Markdown list (a blank line after each), code fences kept."""
    out: list[str] = []
    for number, step in enumerate(steps, 1):
        lines = [ln for block in parse_step(step) for ln in _block_markdown(block)]
        if not lines:
            continue
        out.append(f"{number}. {lines[0]}")
        out += [INDENT + ln if ln.strip() else "" for ln in lines[1:]]
        out.append("")
    return out


def _prose(text: str) -> list[str]:
    return [md_prose(line) for line in text.strip().splitlines()]


def page_markdown(why: str, fix: Sequence[str], verify: str, *, level: int = 2) -> str:
    """The cause's page: why it costs, how to fix (with code), how to verify."""
    heading = "#" * level
    lines = [f"{heading} {WHY}", "", *_prose(why), ""] if why.strip() else []
    lines += [f"{heading} {FIX}", "", *steps_markdown(fix)]
    if verify.strip():
        lines += [f"{heading} {VERIFY}", "", *_prose(verify), ""]
    return "\n".join(lines)


def inline_html(text: str) -> str:
    """Escaped text with its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _block_html(block: Block) -> str:
    if block.code:
        return "<pre><code>" + html.escape("\n".join(block.lines)) + "</code></pre>"
    return "\n".join(inline_html(line) for line in block.lines)


def steps_html(steps: Iterable[str]) -> str:
    """The steps as an HTML ordered list."""
    items = ["<li>" + "\n".join(_block_html(b) for b in parse_step(step)) + "</li>" for step in steps]
    return "<ol>" + "".join(items) + "</ol>"


def page_html(why: str, fix: Sequence[str], verify: str, *, level: int = 3) -> str:
    tag = f"h{level}"
    parts = [f"<{tag}>{WHY}</{tag}><p>{inline_html(why.strip())}</p>"] if why.strip() else []
    parts += [f"<{tag}>{FIX}</{tag}>", steps_html(fix)]
    if verify.strip():
        parts.append(f"<{tag}>{VERIFY}</{tag}><p>{inline_html(verify.strip())}</p>")
    return "\n".join(parts)
