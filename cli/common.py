"""What every command shares: the consoles, the one way a command fails, the environment."""

from __future__ import annotations

import os
from typing import NoReturn

import typer
from rich.console import Console

console = Console()
err = Console(stderr=True)


def setup_env() -> None:
    """The environment GRAFT's commands run in: no model downloads (the models are local), no
    tokenizer thread pools beside the worker threads. Set once, before a command runs; a value the
    user set is kept."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def fail(exc: Exception) -> NoReturn:
    """End a command on an error GRAFT raised on purpose: one red line on stderr, exit code 2."""
    err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
    raise typer.Exit(code=2)
