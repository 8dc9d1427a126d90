"""Bounded JSON reading: every JSON text GRAFT reads (corpus lines and files, query records, eval
files, manifests and other index files, LLM answers) goes through `loads`, `read_json_file` or
`iter_lines`, which refuse what is deeper, longer or larger than any real input before it is parsed.

Python's `json` parser recurses once per nesting level, so a 6 KB line nested 3,000 deep ends a
command with a `RecursionError` traceback; a file without newlines is one "line" that would be read
whole into memory. Both are refused here with `JSONLimitError`, which is an `InputValidationError`
(the corpus loader's `--skip-bad` skips and counts the record) and a `ValueError` (code that treats
invalid JSON as a damaged file does the same with these). The checks are linear scans without
recursion, vectorised with numpy, and run only on texts with more brackets than
`MAX_DEPTH` or longer than `MAX_STRING_BYTES`: an ordinary record costs two `count` calls.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from graft.errors import InputValidationError

#: Nesting of arrays and objects. The deepest JSON GRAFT writes or reads (a survey record, an S2ORC
#: document, a trainer state) is under 10 levels; Python's parser gives up near 1,000.
MAX_DEPTH = 64

#: Bytes of one line of a JSONL file (a corpus record, a `--queries` line). A paper with its full
#: text is 50-500 KB and the longest S2ORC documents a few MB; a longer line is refused without
#: being read whole, so a file without newlines cannot fill the memory.
MAX_LINE_BYTES = 64 * 2**20

#: Bytes of one string value as written (UTF-8; escapes count as written): a paper's full text, the
#: longest field of any input, is at most a few million.
MAX_STRING_BYTES = 32 * 2**20

#: Bytes of a JSON file read whole (a corpus as one JSON array, a `--record`, a manifest): the
#: largest such corpus file GRAFT is given is a few hundred MB.
MAX_FILE_BYTES = 2 * 2**30


class JSONLimitError(InputValidationError, ValueError):
    """A JSON text deeper, longer or larger than GRAFT reads (`MAX_DEPTH`, `MAX_LINE_BYTES`,
    `MAX_STRING_BYTES`, `MAX_FILE_BYTES`)."""


_QUOTE, _BACKSLASH = ord('"'), ord("\\")


def _structure(raw: np.ndarray) -> tuple[int, int]:
    """(the longest string's length in bytes, the deepest nesting) of the JSON text `raw` (its
    bytes), by vectorised passes over the positions of its quotes, backslashes and brackets.

    A quote is escaped when an odd run of backslashes ends just before it; the unescaped quotes
    alternate between opening and closing strings, so a bracket lies outside every string when an
    even number of them precede it."""
    backslashes = np.flatnonzero(raw == _BACKSLASH)
    quotes = np.flatnonzero(raw == _QUOTE)
    if len(backslashes) and len(quotes):
        # the start of the run of consecutive backslashes each backslash belongs to
        breaks = np.diff(backslashes, prepend=-2) != 1
        run_start = backslashes[breaks][np.cumsum(breaks) - 1]
        at = np.searchsorted(backslashes, quotes - 1)
        found = at < len(backslashes)
        ends_before = np.zeros(len(quotes), dtype=bool)
        ends_before[found] = backslashes[at[found]] == quotes[found] - 1
        run = np.zeros(len(quotes), dtype=np.int64)
        run[ends_before] = quotes[ends_before] - run_start[at[ends_before]]
        quotes = quotes[run % 2 == 0]
    pairs = len(quotes) // 2 * 2
    longest = int((quotes[1:pairs:2] - quotes[0:pairs:2] - 1).max()) if pairs else 0
    if len(quotes) % 2:  # an unterminated string runs to the end
        longest = max(longest, len(raw) - int(quotes[-1]) - 1)
    brackets = np.flatnonzero((raw == 91) | (raw == 93) | (raw == 123) | (raw == 125))  # [ ] { }
    outside = brackets[np.searchsorted(quotes, brackets) % 2 == 0]
    step = np.where((raw[outside] == 91) | (raw[outside] == 123), 1, -1)
    deepest = int(np.cumsum(step, dtype=np.int64).max()) if len(step) else 0
    return longest, deepest


def check_bounds(text: str | bytes, where: str = "JSON text", *, max_depth: int = MAX_DEPTH,
                 max_string: int = MAX_STRING_BYTES) -> None:
    """Refuse a JSON text nested deeper than `max_depth` or holding a string longer than
    `max_string` bytes (UTF-8, as written: escapes count as written), by linear scans without
    recursion (`_structure`: numpy over the positions of quotes, backslashes and brackets).

    Raises:
        JSONLimitError: naming `where` and the limit.
    """
    is_bytes = isinstance(text, bytes | bytearray)
    opens = text.count(b"[") + text.count(b"{") if is_bytes else text.count("[") + text.count("{")  # type: ignore[arg-type]
    if opens <= max_depth and len(text) <= max_string + 2:
        return
    raw = np.frombuffer(text if is_bytes else text.encode("utf-8", "surrogatepass"), np.uint8)  # type: ignore[union-attr]
    longest, deepest = _structure(raw)
    if longest > max_string:
        raise JSONLimitError(f"{where}: a string of {longest:,} bytes, longer than the {max_string:,} GRAFT reads")
    if deepest > max_depth:
        raise JSONLimitError(f"{where}: nested more than {max_depth} levels deep (arrays and objects); "
                             "no input GRAFT reads is")


def loads(text: str | bytes, where: str = "JSON text", *, max_depth: int = MAX_DEPTH,
          max_string: int = MAX_STRING_BYTES) -> Any:
    """`json.loads` of a text that `check_bounds` accepts.

    Raises:
        JSONLimitError: too deep or a string too long.
        ValueError: not valid JSON (`json.JSONDecodeError`, or `UnicodeDecodeError` for bytes).
    """
    check_bounds(text, where, max_depth=max_depth, max_string=max_string)
    return json.loads(text)


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """One JSON file, read whole only when it is at most `max_bytes` long (UTF-8, -16 or -32, with
    or without a byte-order mark, as `json.loads` reads bytes).

    Raises:
        JSONLimitError: the file is larger, nested too deep or holds a string too long.
        ValueError: not valid JSON; OSError: the file cannot be read.
    """
    path = Path(path)
    size = path.stat().st_size
    if size > max_bytes:
        raise JSONLimitError(f"{path}: {size:,} bytes, more than the {max_bytes:,} GRAFT reads as one JSON file")
    return loads(path.read_bytes(), str(path))


def iter_lines(fh: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line) per line of a binary file, reading at most `max_bytes` of a line at
    once; a longer line is skipped to its end in `max_bytes` pieces and given as None, so it is
    never held whole in memory."""
    lineno = 0
    while True:
        line = fh.readline(max_bytes + 1)
        if not line:
            return
        lineno += 1
        if len(line) <= max_bytes or line.endswith(b"\n") and len(line) == max_bytes + 1:
            yield lineno, line
            continue
        while line and not line.endswith(b"\n"):  # the rest of the over-long line
            line = fh.readline(max_bytes)
        yield lineno, None
