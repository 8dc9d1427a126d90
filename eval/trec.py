"""TREC run and qrels files: `{qid} Q0 {docid} {rank} {score:.6f} {tag}` and `{qid} 0 {docid} {rel}`.

Runs are written with ties broken by (-score, docid), so a ranking always serialises the same way;
reading a run orders each query's documents by (-score, docid) again, whatever the file's rank
column says (as trec_eval does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from graft.errors import InputValidationError
from graft.store import atomic_path

Run = dict[str, list[tuple[str, float]]]  # qid -> [(docid, score)], best first
Qrels = dict[str, set[str]]  # qid -> relevant docids


def format_run(run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> list[str]:
    """TREC run lines of a run, queries in sorted order, ties broken by docid."""
    if not tag or any(c.isspace() for c in tag):
        raise InputValidationError(f"run tag {tag!r} must be a non-empty word without spaces")
    lines = []
    for qid in sorted(run):
        ranked = sorted(run[qid], key=lambda x: (-x[1], x[0]))
        lines += [f"{qid} Q0 {d} {r} {s:.6f} {tag}" for r, (d, s) in enumerate(ranked, 1)]
    return lines


def write_run(path: str | Path, run: Mapping[str, Sequence[tuple[str, float]]], tag: str) -> Path:
    """Write a run file atomically (a query with no documents writes no line)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text("".join(line + "\n" for line in format_run(run, tag)), encoding="utf-8")
    return path


def read_run(path: str | Path) -> Run:
    """Read a TREC run file.

    Raises:
        InputValidationError: a line without the six fields or with a non-numeric score.
    """
    path = Path(path)
    if not path.is_file():
        raise InputValidationError(f"run file not found: {path}")
    out: dict[str, list[tuple[str, float]]] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 6:
                raise ValueError
            qid, _, docid, _, score = parts[0], parts[1], parts[2], parts[3], float(parts[4])
        except ValueError:
            raise InputValidationError(
                f"{path.name} line {lineno}: not a TREC run line ('qid Q0 docid rank score tag'): {line!r}"
            ) from None
        out.setdefault(qid, []).append((docid, score))
    for docs in out.values():
        docs.sort(key=lambda x: (-x[1], x[0]))
    return out


def read_qrels(path: str | Path) -> Qrels:
    """Read TREC qrels (`qid 0 docid rel`); documents with rel > 0 are relevant.

    Raises:
        InputValidationError: a line without the four fields or with a non-integer relevance.
    """
    path = Path(path)
    if not path.is_file():
        raise InputValidationError(f"qrels file not found: {path}")
    out: Qrels = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 4:
                raise ValueError
            rel = int(parts[3])
        except ValueError:
            raise InputValidationError(
                f"{path.name} line {lineno}: not a TREC qrels line ('qid 0 docid rel'): {line!r}"
            ) from None
        if rel > 0:
            out.setdefault(parts[0], set()).add(parts[2])
    return out
