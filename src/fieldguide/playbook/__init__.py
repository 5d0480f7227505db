"""Playbooks: decision trees as data. Loading, validation and expectations.

Never imports Textual or torch.
"""

from fieldguide.playbook.expect import Expectation, parse_expectation
from fieldguide.playbook.loader import (
    PlaybookError,
    find_playbook,
    list_playbooks,
    load_causes,
    load_playbook,
    playbook_dirs,
)
from fieldguide.playbook.schema import Cause, Edge, MeasureOption, Node, Playbook

__all__ = [
    "Cause",
    "Edge",
    "Expectation",
    "MeasureOption",
    "Node",
    "Playbook",
    "PlaybookError",
    "find_playbook",
    "list_playbooks",
    "load_causes",
    "load_playbook",
    "parse_expectation",
    "playbook_dirs",
]
