"""What runs inside a launched target.

`runtime.py` is loaded by file path from a generated `sitecustomize.py`, so the
target's interpreter needs neither fieldguide nor its dependencies installed:
the agent uses only the standard library, and torch once the script imports it.
"""

from pathlib import Path

RUNTIME_FILE = Path(__file__).with_name("runtime.py")
