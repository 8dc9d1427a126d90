"""TREC run and qrels files: `{qid} Q0 {docid} {rank} {score} {tag}` and `{qid} 0 {docid} {rel}`.

Runs are written with ties broken by (-score, docid), so a ranking always serialises the same way;
reading a run orders each query's documents by score again, whatever the file's rank column says
(as trec_eval does), with equal scores by docid ascending, the order the systems ranked them in
(`TIES`). trec_eval breaks ties the other way, by docid descending (`ties="trec_eval"`, `graft eval
score --ties trec_eval`): where scores tie across a cut-off its recall can differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from graft.errors import ConfigError, InputValidationError
from graft.results import trec_lines
from graft.store import write_lines

Run = dict[str, list[tuple[str, float]]]  # qid -> [(docid, score)], best first
Qrels = dict[str, set[str]]  # qid -> relevant docids


def format_run(run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> list[str]:
    """TREC run lines of a run, queries in sorted order, ties broken by docid.

    Raises:
        InputValidationError: a qid, docid or tag that is not one word, or a docid twice in a query.
    """
    return [line for qid in sorted(run) for line in trec_lines(qid, run[qid], tag)]


def write_run(path: str | Path, run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> Path:
    """Write a run file atomically (a query with no documents writes no line)."""
    path = Path(path)
    write_lines(path, format_run(run, tag))
    return path


def _parsed_lines(path: str | Path, kind: str, form: str, n_fields: int,
                  parse: Callable[[list[str]], tuple]) -> Iterator[tuple[int, tuple]]:
    """(line number, `parse(fields)`) of every non-blank line of a TREC `kind` file with `n_fields`
    fields (UTF-8; a leading byte-order mark is allowed).

    Raises:
        InputValidationError: a missing or unreadable file, or a line with another field count or
            that `parse` rejects (ValueError), named by file and line number.
    """
    path = Path(path)
    if path.is_dir():
        raise InputValidationError(f"{path} is a folder, not a {kind} file")
    if not path.is_file():
        raise InputValidationError(f"{kind} file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputValidationError(f"{kind} file {path}: cannot read it as UTF-8 text ({exc})") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != n_fields:
                raise ValueError
            yield lineno, parse(parts)
        except _BadField as exc:
            raise InputValidationError(f"{path.name} line {lineno}: {exc}: {line!r}") from None
        except ValueError:
            raise InputValidationError(f"{path.name} line {lineno}: not a TREC {kind} line ({form!r}): {line!r}") from None


class _BadField(ValueError):
    """A field of the right form whose value a TREC file must not hold; the message says why."""


def _finite(text: str) -> float:
    """A run score: a finite number (nan would leave the ranking undefined), else ValueError."""
    value = float(text)
    if not math.isfinite(value):
        raise _BadField(f"score {text!r} is not a finite number (the ranking would be undefined)")
    return value


#: How equal scores are ordered when a run is read: "docid" (ascending: the systems' own order) or
#: "trec_eval" (descending, as trec_eval's `comp_sim_docno` sorts them).
TIES = ("docid", "trec_eval")


def read_run(path: str | Path, ties: str = "docid") -> Run:
    """Read a TREC run file, each query's documents by score, ties ordered as `ties` says (`TIES`).

    Raises:
        ValueError: an unknown `ties`.
        InputValidationError: a line without the six fields or with a non-numeric or non-finite score, or a
            document listed twice for one query (it would fill two places of the ranking).
    """
    if ties not in TIES:
        raise ConfigError(f"ties {ties!r} is unknown; use one of {', '.join(TIES)}")
    out: dict[str, list[tuple[str, float]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for lineno, (qid, docid, score) in _parsed_lines(path, "run", "qid Q0 docid rank score tag", 6,
                                                     lambda p: (p[0], p[2], _finite(p[4]))):
        if (qid, docid) in seen:
            raise InputValidationError(f"{Path(path).name} line {lineno}: document {docid!r} is listed again for "
                                       f"query {qid!r} (first at line {seen[qid, docid]}); a run ranks each "
                                       "document once per query")
        seen[qid, docid] = lineno
        out.setdefault(qid, []).append((docid, score))
    for docs in out.values():
        docs.sort(key=lambda x: x[0], reverse=ties == "trec_eval")
        docs.sort(key=lambda x: -x[1])  # stable: equal scores keep the docid order above
    return out


def read_qrels(path: str | Path) -> Qrels:
    """Read TREC qrels (`qid 0 docid rel`); documents with rel > 0 are relevant.

    Raises:
        InputValidationError: a line without the four fields or with a non-integer relevance.
    """
    out: Qrels = {}
    for _, (qid, docid, rel) in _parsed_lines(path, "qrels", "qid 0 docid rel", 4,
                                              lambda p: (p[0], p[2], int(p[3]))):
        if rel > 0:
            out.setdefault(qid, set()).add(docid)
    return out
