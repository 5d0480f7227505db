"""The sitecustomize that loads the agent into every Python process of a launched target."""

from __future__ import annotations

from pathlib import Path

SITECUSTOMIZE = '''\
# Written by fieldguide: loads its agent, then any sitecustomize this one shadows.
import os as _os, sys as _sys
def _fieldguide_boot():
    import importlib.util
    path = _os.environ.get("FIELDGUIDE_AGENT_FILE")
    if path and _os.environ.get("FIELDGUIDE_AGENT_SOCKET"):
        try:
            spec = importlib.util.spec_from_file_location(
                "_fieldguide_agent", path, submodule_search_locations=[_os.path.dirname(path)])
            module = importlib.util.module_from_spec(spec)
            _sys.modules["_fieldguide_agent"] = module
            spec.loader.exec_module(module)
            module.install()
        except Exception as err:  # the job must run the same with or without us
            _sys.stderr.write(f"fieldguide agent not loaded: {err}\\n")
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    import importlib.machinery
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and _os.path.dirname(spec.origin) != here:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
_fieldguide_boot()
del _fieldguide_boot
'''


def write_bootstrap(directory: Path) -> Path:
    path = directory / "sitecustomize.py"
    path.write_text(SITECUSTOMIZE)
    return path
