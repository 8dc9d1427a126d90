"""Bounded JSON reading: every JSON text GRAFT reads (corpus lines and files, query records, eval
files, manifests and other index files, LLM answers) goes through `loads`, `read_json_file` or
`iter_lines`, which refuse what is deeper, longer or larger than any real input before it is parsed.

Python's `json` parser recurses once per nesting level, so a 6 KB line nested 3,000 deep ends a
command with a `RecursionError` traceback; a file without newlines is one "line" that would be read
whole into memory. Both are refused here with `JSONLimitError`, which is an `InputValidationError`
(the corpus loader's `--skip-bad` skips and counts the record) and a `ValueError` (code that treats
invalid JSON as a damaged file does the same with these). The depth check is a linear scan of
brackets outside strings, without recursion, and runs only on texts with more brackets than
`MAX_DEPTH` or longer than `MAX_STRING_CHARS`: an ordinary record costs two `count` calls.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from graft.errors import InputValidationError

#: Nesting of arrays and objects. The deepest JSON GRAFT writes or reads (a survey record, an S2ORC
#: document, a trainer state) is under 10 levels; Python's parser gives up near 1,000.
MAX_DEPTH = 64

#: Bytes of one line of a JSONL file (a corpus record, a `--queries` line). A paper with its full
#: text is 50-500 KB and the longest S2ORC documents a few MB; a longer line is refused without
#: being read whole, so a file without newlines cannot fill the memory.
MAX_LINE_BYTES = 64 * 2**20

#: Characters of one string value as written (escapes count as written): a paper's full text, the
#: longest field of any input, is at most a few million.
MAX_STRING_CHARS = 32 * 2**20

#: Bytes of a JSON file read whole (a corpus as one JSON array, a `--record`, a manifest): the
#: largest such corpus file GRAFT is given is a few hundred MB.
MAX_FILE_BYTES = 2 * 2**30


class JSONLimitError(InputValidationError, ValueError):
    """A JSON text deeper, longer or larger than GRAFT reads (`MAX_DEPTH`, `MAX_LINE_BYTES`,
    `MAX_STRING_CHARS`, `MAX_FILE_BYTES`)."""


# a string (its escapes skipped, possessive: no backtracking) or one bracket; whatever else lies
# between them (numbers, literals, commas, white space) is skipped by finditer in C
_TOKENS = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{}]', re.DOTALL)
_TOKENS_BYTES = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{}]', re.DOTALL)


def check_bounds(text: str | bytes, where: str = "JSON text", *, max_depth: int = MAX_DEPTH,
                 max_string: int = MAX_STRING_CHARS) -> None:
    """Refuse a JSON text nested deeper than `max_depth` or holding a string longer than
    `max_string` characters, in one linear scan of its strings and brackets (no recursion).

    Raises:
        JSONLimitError: naming `where` and the limit.
    """
    is_bytes = isinstance(text, bytes | bytearray)
    opens = text.count(b"[") + text.count(b"{") if is_bytes else text.count("[") + text.count("{")
    if opens <= max_depth and len(text) <= max_string + 2:
        return
    quote, opening = (ord('"'), b"[{") if is_bytes else ('"', "[{")
    depth = 0
    for match in (_TOKENS_BYTES if is_bytes else _TOKENS).finditer(text):  # type: ignore[arg-type]
        first = match.group()[0]
        if first == quote:
            if match.end() - match.start() - 2 > max_string:
                raise JSONLimitError(f"{where}: a string of {match.end() - match.start() - 2:,} characters, "
                                     f"longer than the {max_string:,} GRAFT reads")
        elif first in opening:
            depth += 1
            if depth > max_depth:
                raise JSONLimitError(f"{where}: nested more than {max_depth} levels deep (arrays and objects); "
                                     "no input GRAFT reads is")
        else:
            depth -= 1


def loads(text: str | bytes, where: str = "JSON text", *, max_depth: int = MAX_DEPTH,
          max_string: int = MAX_STRING_CHARS) -> Any:
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
