"""`fieldguide completion bash|zsh|fish`: a completion script for the shell, made from the parser
itself (every command and its options), with playbook ids read from `fieldguide playbooks` and
cause ids from the bundled pages when the user presses Tab."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "fish")

# What completes a value, by option or positional: a playbook id, a cause id, a pid, a path.
# (fish offers each line of a command's output as it is, without evaluating it; the ids are
# filtered to id characters all the same.)
PLAYBOOK_IDS = "fieldguide playbooks 2>/dev/null | string match -r '^[A-Za-z0-9._-]+'"
CAUSE_IDS = "fieldguide explain --list 2>/dev/null | string match -r '^[A-Za-z0-9._-]+'"


def commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each command's options (the top level under ""), from the parser."""
    found: dict[str, list[str]] = {"": _options(parser)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = _options(sub)
    return found


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--"))


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}; use one of {', '.join(SHELLS)}")
    table = commands(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](table)


def _bash(table: dict[str, list[str]]) -> str:
    names = " ".join(n for n in table if n)
    cases = "\n".join(f"        {name}) opts=\"{' '.join(opts)}\" ;;" for name, opts in table.items() if name)
    return f"""# fieldguide completion for bash: eval "$(fieldguide completion bash)" (e.g. in ~/.bashrc)
# Ids are read a line at a time and offered only when they are ids: nothing a playbook or a cause
# page says is ever expanded by the shell (compgen -W "$(...)" would run `$(...)` inside an id).
_fieldguide_ids() {{
    local id
    while IFS= read -r id; do
        id="${{id%% *}}"
        [[ "$id" =~ ^[A-Za-z0-9._-]+$ && "$id" == "$cur"* ]] && COMPREPLY+=("$id")
    done < <("$@" 2>/dev/null)
}}
_fieldguide_playbook_ids() {{ fieldguide playbooks; }}
_fieldguide_cause_ids() {{ fieldguide explain --list; }}
_fieldguide_pids() {{ pgrep -u "$(id -u)" python; }}  # the numeric uid: no $USER, no passwd entry needed
_fieldguide() {{
    local cur prev cmd opts i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ "${{COMP_WORDS[i]}}" == "--" ]] && return 0   # the launched command's own arguments
        [[ -z "$cmd" && "${{COMP_WORDS[i]}}" != -* ]] && cmd="${{COMP_WORDS[i]}}"
    done
    case "$prev" in
        --playbook) COMPREPLY=(); _fieldguide_ids _fieldguide_playbook_ids; return 0 ;;
        --pid) COMPREPLY=(); compopt +o default 2>/dev/null; _fieldguide_ids _fieldguide_pids; return 0 ;;
        --report|--output|-o) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
        --format) COMPREPLY=($(compgen -W "json md html" -- "$cur")); return 0 ;;
    esac
    if [[ -z "$cmd" ]]; then
        COMPREPLY=($(compgen -W "{names} {' '.join(table[''])}" -- "$cur")); return 0
    fi
    case "$cmd" in
{cases}
    esac
    if [[ "$cmd" == explain && "$cur" != -* ]]; then
        COMPREPLY=(); _fieldguide_ids _fieldguide_cause_ids; return 0
    fi
    if [[ "$cmd" == report && "$cur" != -* ]]; then
        COMPREPLY=($(compgen -f -- "$cur")); return 0
    fi
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}}
complete -o default -F _fieldguide fieldguide
"""


def _zsh(table: dict[str, list[str]]) -> str:
    # zsh runs bash completion functions through bashcompinit: one script to keep right.
    return ("#compdef fieldguide\n# fieldguide completion for zsh: eval \"$(fieldguide completion zsh)\" "
            "(e.g. in ~/.zshrc)\nautoload -U +X bashcompinit && bashcompinit\n" + _bash(table))


def _fish(table: dict[str, list[str]]) -> str:
    lines = ["# fieldguide completion for fish: fieldguide completion fish > ~/.config/fish/completions/fieldguide.fish",
             "complete -c fieldguide -f"]
    names = [n for n in table if n]
    lines.append(f"complete -c fieldguide -n '__fish_use_subcommand' -a '{' '.join(names)}'")
    for name, opts in table.items():
        when = "__fish_use_subcommand" if not name else f"__fish_seen_subcommand_from {name}"
        for opt in opts:
            extra = ""
            if opt == "--playbook":
                extra = f" -r -a '({PLAYBOOK_IDS})'"
            elif opt in ("--report", "--output"):
                extra = " -r -F"
            elif opt == "--format":
                extra = " -r -a 'json md html'"
            elif opt == "--pid":
                extra = " -r -a '(pgrep -u (id -u) python)'"
            lines.append(f"complete -c fieldguide -n '{when}' -l {opt[2:]}{extra}")
    lines.append(f"complete -c fieldguide -n '__fish_seen_subcommand_from explain' -a '({CAUSE_IDS})'")
    lines.append("complete -c fieldguide -n '__fish_seen_subcommand_from report' -F")
    return "\n".join(lines) + "\n"
