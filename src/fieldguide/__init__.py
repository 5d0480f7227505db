"""fieldguide: a terminal field guide for slow PyTorch training jobs.

The package root stays free of heavy imports (torch, pynvml, textual) so that
`fieldguide --help` starts instantly.
"""

__version__ = "0.1.0"
