"""Screens: target picker, playbook picker, the walk, the departure, help."""
