"""The parts of a py-spy `record --format raw --threads --subprocesses` line: the process chain,
the thread, each frame (`function (file:line)`). Read by the stack probe and the speedscope writer."""

from __future__ import annotations

import re

PROCESS = re.compile(r'process (\d+):"')
THREAD = re.compile(r"thread \((\w+)\)(?:: (.*))?$")
FRAME = re.compile(r"^(.*) \((.*?)(?::(\d+))?\)$")
