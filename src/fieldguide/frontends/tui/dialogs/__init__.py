"""Modal dialogs: export (with its overwrite confirmation), launch a command, errors."""
