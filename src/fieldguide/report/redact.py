"""Secrets never reach a report: tokens, keys and passwords in argv, env vars and log lines."""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"
# One list of what a secret is called, for names (env vars, flags) and for names inside text.
# A tokenizer (`--tokenizer gpt2`) and an author are no secrets.
_WORDS = (r"token(?!i[sz])|secret|passw(?:or)?d|passwd|passphrase|pwd|api[_-]?key|access[_-]?key|private[_-]?key|"
          r"credential|auth(?!or)|session[_-]?key|(?<=[a-z0-9])[_-]key|^-*login$")
_SECRET_NAME = re.compile(rf"({_WORDS}|^-*key$)", re.I)
# `pass` and `pw` are secrets' names only as a flag (`--pass`), after a separator (`DB_PASS`,
# `redis-pw`), as a key (a JSON key, an environment variable, `pass=X`) or in capitals (`PASS:`):
# a bare lowercase `pass` in prose ("3 nodes pass: ...") is a word, not a name.
_SHORT_NAME = re.compile(r"(?P<lead>-*)(?P<prefix>[\w.\-]*[_.\-])?(?P<word>pass|pw)", re.I)
# Values that are secrets whatever they are called.
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_\-]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|"
    r"xox[abpr]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+|"
    r"wandb_[A-Za-z0-9]{20,}|[A-Za-z0-9]{40,})")
# A name (a whole run of name characters: scanning from inside a run made long tokens cubic),
# its separator and its value; the name is then checked for a secret's word.
# A quote may close the name (`"password": "x"`, `'token': 'x'`, `\"api_key\":\"x\"` in a JSON
# string inside a log line): a JSON or Python dict key.
_ASSIGNMENT = re.compile(r"(?<![\w.\-])(?P<name>[\w.\-]+)(?P<quote>\\?[\"'])?(?P<sep>\s*[=:]\s*)")
# A quoted value (escapes inside it skipped), else a run of non-space; after a key, the run ends
# at the `,`, `}` or `]` that ends a JSON or dict value.
_QUOTED = r"\\\".*?\\\"|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
_VALUE = re.compile(rf"{_QUOTED}|\S+")
_KEY_VALUE = re.compile(rf"{_QUOTED}|[^\s,}}\]]+")
# `--token VALUE` inside one string (a `bash -c "..."` argument, a log line).
_FLAG = re.compile(r"(?<![\w.\-])(?P<name>--?[\w.\-]+)(?P<sep>\s+)(?P<value>[^\s-]\S*)")
# `tokenizer.py:88`, `hf_token_utils.py:12`: a source file's line, not a secret's value.
_SOURCE_LINE = re.compile(r"\.(?:py|pyx|pyi|c|cc|cpp|h|hpp|cu|cuh|rs|go|js|ts|sh|yaml|yml|toml|json|txt|log)$", re.I)
_ARG_NAME = re.compile(r"-*[\w.\-]+")
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=\-]{8,}", re.I)
# `scheme://user:password@host`, `redis://:password@host` (no user); a password may hold an `@`:
# the host starts after the last one before the path.
# The password stops at a quote (a URL inside a JSON string), so a later `@` leaves the JSON whole.
_URL_PASSWORD = re.compile(r"(://[^/\s:@\"']*:)((?:[^\s/?#\"'\\]|\\(?![\"']))+)(@)")


def is_secret_name(name: str, *, key: bool = False) -> bool:
    """Whether `name` (an environment variable, a flag with its dashes, a key) names a secret;
    `key`: it is a key or a variable's name, where a bare `pass` or `pw` is one too."""
    if _SECRET_NAME.search(name):
        return True
    short = _SHORT_NAME.fullmatch(name)
    if short is None:
        return False
    return bool(short.group("lead") or short.group("prefix") or key or short.group("word") in ("PASS", "PW", "pw"))


def _redact_assignments(text: str) -> str:
    """`NAME=value` / `name: value` with a secret's name: the value replaced. Each name is read
    from the start of its run, and a value is only consumed where it is redacted, so that
    `a=b,token=c` is still seen."""
    out: list[str] = []
    done = 0
    for m in _ASSIGNMENT.finditer(text):
        quoted_key = m.group("quote") is not None
        key = quoted_key or m.group("sep").strip() == "="
        if m.start() < done or not is_secret_name(m.group("name"), key=key):
            continue
        value = (_KEY_VALUE if quoted_key else _VALUE).match(text, m.end())
        if value is None or (quoted_key and value.group(0)[0] in "{["):
            continue  # a key whose value is an object or a list: its own keys are read in turn
        if m.group("sep").strip() == ":" and _SOURCE_LINE.search(m.group("name")) \
                and re.fullmatch(r"\d+[)\],;.]*", value.group(0)):
            continue  # a source file's line
        out.append(text[done:m.end()] + _quotes_kept(value.group(0)))
        done = value.end()
    out.append(text[done:])
    return "".join(out)


def _quotes_kept(value: str) -> str:
    """The redaction of a value, in the value's quotes: `"password": "[redacted]"` stays JSON."""
    for quote in ('\\"', '"', "'"):
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            return quote + REDACTED + quote
    return REDACTED


def _redact_flag(m: re.Match[str]) -> str:
    return f"{m.group('name')}{m.group('sep')}{REDACTED}" if is_secret_name(m.group("name")) else m.group(0)


# A private key pasted whole, and a password said in prose ("password hunter2", "passphrase is x").
_PEM = re.compile(r"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE REQUEST)[A-Z ]*-----.*?"
                  r"(?:-----END [A-Z0-9 ]*-----|\Z)", re.S)
_PROSE_PASSWORD = re.compile(r"\b(?P<name>password|passphrase|passwd)(?P<sep>\s+(?:is\s+|was\s+)?)"
                             r"(?P<value>(?!\[redacted\])[^\s,;.]\S*)", re.I)
# `mysql -pSECRET`: the short password flag written against its value.
_GLUED_P = re.compile(r"^-p(?=\S)")


def redact_text(text: str) -> str:
    text = _PEM.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _redact_assignments(text)
    text = _FLAG.sub(_redact_flag, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    text = _PROSE_PASSWORD.sub(lambda m: m.group("name") + m.group("sep") + REDACTED, text)
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_argv(argv: list[str]) -> list[str]:
    """`--token X`, `--pass X`, `--api-key=X`, `--token:X`, `PASSWORD=X` and secret-looking values
    are replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if eq and _ARG_NAME.fullmatch(name):  # not `{"password": "a=b"}`: that is text
            if is_secret_name(name, key=not name.startswith("-")):
                out.append(f"{name}={REDACTED}")
                continue
        elif not eq and arg.startswith("-") and ":" not in arg and (is_secret_name(arg) or arg == "-p"):
            out.append(arg)  # `--token X`, `mysql -p X`; `--token:X` is one argument, redacted as text
            hide_next = True
            continue
        elif _GLUED_P.match(arg) and out and _is_client(out):
            out.append("-p" + REDACTED)  # `mysql -pSECRET`
            continue
        out.append(redact_text(arg))
    return out


_CLIENTS = re.compile(r"(?:^|/)(?:mysql\w*|mariadb\w*|mongo\w*|redis-cli|psql|sshpass|openssl|zip|7z|unrar)$")


def _is_client(before: list[str]) -> bool:
    """A command whose `-pX` is a password (mysql, sshpass, zip...), among the arguments so far."""
    return any(_CLIENTS.search(arg) for arg in before)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k, key=True) else redact_text(v)) for k, v in env.items()}


def redact_tree(value: Any) -> Any:
    """Apply text redaction to every string in a JSON-able tree (a last line of defence)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(v, str) and is_secret_name(str(k), key=True) else redact_tree(v))
                for k, v in value.items()}
    return value
