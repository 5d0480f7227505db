"""What a walk measures: the machine alone (`LocalTarget`), a running process fieldguide attaches
to and never touches (`AttachTarget`), or a command it launches with its agent and ends
(`LaunchTarget`)."""

from fieldguide.targets.attach import AttachTarget
from fieldguide.targets.base import LocalTarget, Target, gpu_present
from fieldguide.targets.launch import LaunchTarget
from fieldguide.targets.signals import ending_signals_held

__all__ = ["AttachTarget", "LaunchTarget", "LocalTarget", "Target", "ending_signals_held", "gpu_present"]
