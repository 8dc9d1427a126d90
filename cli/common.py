"""What every command shares: the consoles, the one way a command fails, the environment."""

from __future__ import annotations

import os
import re
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

#: Control characters (but newline and tab) and the Unicode controls that reorder or hide text.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def safe(text: object) -> str:
    """`text` as it may reach a terminal: each control character (NUL, ESC of a colour code, a
    carriage return, a bidirectional override) shown as its escape (`\\x1b`), never sent raw."""
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], str(text))


class SafeConsole(Console):
    """The CLI's consoles print text that comes from data (titles, ids, topics, file names, error
    messages quoting them) as it is: rich markup (`[/b]`) and emoji codes (`:x:`) are not read, and
    control characters go through `safe`. Styles are given with `style=` or `Text`, never as markup."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)  # type: ignore[arg-type]

    def render_str(self, text: str, **kwargs: object) -> Text:  # type: ignore[override]
        return super().render_str(safe(text), **kwargs)  # type: ignore[arg-type]


console = SafeConsole()
err = SafeConsole(stderr=True)


def setup_env() -> None:
    """The environment GRAFT's commands run in: no model downloads (the models are local), no
    tokenizer thread pools beside the worker threads. Set once, before a command runs; a value the
    user set is kept."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def fail(exc: Exception | str) -> NoReturn:
    """End a command on an error GRAFT raised on purpose: one red line on stderr, exit code 2."""
    err.print(Text.assemble(("error:", "bold red"), " ", safe(exc)), highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)
