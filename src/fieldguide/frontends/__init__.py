"""The front ends: the command line, the headless walk and the TUI. They drive a walk and show its findings; none is imported by the core."""
