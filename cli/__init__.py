"""The `graft` command line: one thin Typer command per user action."""
