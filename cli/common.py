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


#: Most characters printed of one string (a title, an id, a message quoting them; GRAFT's own messages
#: stay under about 1,000): a field of data may be megabytes long, and the terminal gets its start and
#: end with the count left out between.
MAX_PRINTED = 2000
#: Most characters of a title in a table of results.
MAX_TITLE = 300


def clip(text: object, limit: int = MAX_PRINTED) -> str:
    """`text` cut to about `limit` characters: its start and its end (where a message says what to
    do) with an ellipsis and the number of characters left out between them."""
    text = str(text)
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} … ({len(text) - head - tail:,} characters left out) … {text[len(text) - tail:]}"


class SafeConsole(Console):
    """The CLI's consoles print text that comes from data (titles, ids, topics, file names, error
    messages quoting them) as it is: rich markup (`[/b]`) and emoji codes (`:x:`) are not read,
    control characters go through `safe`, and a string longer than `MAX_PRINTED` is cut (`clip`).
    Styles are given with `style=` or `Text`, never as markup."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)  # type: ignore[arg-type]

    def render_str(self, text: str, **kwargs: object) -> Text:  # type: ignore[override]
        return super().render_str(safe(clip(text)), **kwargs)  # type: ignore[arg-type]


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
    err.print(Text.assemble(("error:", "bold red"), " ", safe(clip(exc))), highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)
