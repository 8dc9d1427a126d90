"""Option parsers shared by the commands."""

from __future__ import annotations

import math
from collections.abc import Callable

import typer


def finite(low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """A parser of a float option that refuses NaN and infinity (which pass or fail range checks
    the wrong way: `--alpha nan` was "should be <= 1") and values outside [low, high], with a
    message naming the range. Use with `metavar` and the range in the help text (typer's own
    `min`/`max` do not apply to an option with a parser)."""
    where = ("" if low is None and high is None else f" in [{low:g}, {high:g}]" if low is not None and high is not None
             else f" >= {low:g}" if low is not None else f" <= {high:g}")

    def parse(text: str | float) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
            raise typer.BadParameter(f"{text} is not a finite number{where}")
        return value

    parse.min, parse.max = low, high  # type: ignore[attr-defined]  # the declared range, for tests and docs
    return parse
