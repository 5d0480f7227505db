"""The agent: what runs inside a launched target (inside/), and fieldguide's end of its channel.

`inside/` is loaded by file path as a package from a generated `sitecustomize.py`, so
the target's interpreter needs neither fieldguide nor its dependencies installed:
the agent uses only the standard library, and torch once the script imports it.
"""

from pathlib import Path

AGENT_PACKAGE_FILE = Path(__file__).with_name("inside") / "__init__.py"
