"""Experiments on a launched job: the A/B relaunch, try-the-fix, and `fieldguide timing`."""
