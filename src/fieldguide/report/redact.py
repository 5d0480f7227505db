"""Secrets never reach a report: tokens, keys and passwords in argv, env vars and log lines."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
# One list of what a secret is called, for names (env vars, flags) and for names inside text.
_WORDS = (r"token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|access[_-]?key|private[_-]?key|credential|"
          r"auth|session[_-]?key|(?<=[a-z0-9])[_-]key")
_SECRET_NAME = re.compile(rf"({_WORDS}|^key$)", re.I)
# Values that are secrets whatever they are called.
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|"
    r"xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+|"
    r"wandb_[A-Za-z0-9]{20,}|[A-Za-z0-9]{40,})")
# A name (a whole run of name characters: scanning from inside a run made long tokens cubic),
# its separator and its value; the name is then checked for a secret's word.
_ASSIGNMENT = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]+)(?P<sep>\s*[=:]\s*)")
_VALUE = re.compile(r"\"[^\"]*\"|'[^']*'|\S+")
# `--token VALUE` inside one string (a `bash -c "..."` argument, a log line).
_FLAG = re.compile(r"(?<![\w.\-])(?P<name>--?[\w.\-]+)(?P<sep>\s+)(?P<value>[^\s-]\S*)")
# `tokenizer.py:88`, `hf_token_utils.py:12`: a source file's line, not a secret's value.
_SOURCE_LINE = re.compile(r"\.(?:py|pyx|pyi|c|cc|cpp|h|hpp|cu|cuh|rs|go|js|ts|sh|yaml|yml|toml|json|txt|log)$", re.I)
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}", re.I)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)([^@\s/]+)(@)")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def _redact_assignments(text: str) -> str:
    """`NAME=value` / `name: value` with a secret's name: the value replaced. Each name is read
    from the start of its run, and a value is only consumed where it is redacted, so that
    `a=b,token=c` is still seen."""
    out: list[str] = []
    done = 0
    for m in _ASSIGNMENT.finditer(text):
        if m.start() < done or not is_secret_name(m.group("name")):
            continue
        value = _VALUE.match(text, m.end())
        if value is None:
            continue
        if m.group("sep").strip() == ":" and _SOURCE_LINE.search(m.group("name")) \
                and re.fullmatch(r"\d+[)\],;.]*", value.group(0)):
            continue  # a source file's line
        out.append(text[done:m.end()] + REDACTED)
        done = value.end()
    out.append(text[done:])
    return "".join(out)


def _redact_flag(m: re.Match[str]) -> str:
    return f"{m.group('name')}{m.group('sep')}{REDACTED}" if is_secret_name(m.group("name")) else m.group(0)


def redact_text(text: str) -> str:
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _redact_assignments(text)
    text = _FLAG.sub(_redact_flag, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """`--token X`, `--api-key=X`, `PASSWORD=X` and secret-looking values are replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-") and "=" not in arg and is_secret_name(arg.lstrip("-")):
            out.append(arg)
            hide_next = True
            continue
        if "=" in arg:
            name, _, _ = arg.partition("=")
            if is_secret_name(name.lstrip("-")):
                out.append(f"{name}={REDACTED}")
                continue
        out.append(redact_text(arg))
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else redact_text(v)) for k, v in env.items()}


def redact_tree(value: Any) -> Any:
    """Apply text redaction to every string in a JSON-able tree (a last line of defence)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(v, str) and is_secret_name(str(k)) else redact_tree(v))
                for k, v in value.items()}
    return value
