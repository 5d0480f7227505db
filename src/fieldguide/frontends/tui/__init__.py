"""The Textual TUI of fieldguide: pick a target and a playbook, walk it, read the departure, export.

Only this package imports Textual. It never imports torch: probes run in thread
workers in this process and read the target from outside (or through the agent
inside a launched job). `app.make_app` is the one factory used by the CLI, the
tests and the screenshot script.
"""
