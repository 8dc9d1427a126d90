"""Query records: what `graft query` and `graft.query.Searcher` take as a query paper.

A query is a JSON object with the `id` of a corpus paper, or a paper outside the corpus given by its
`title` and/or `abstract` (optionally `references` into the corpus, `full_text` and an `id`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graft.errors import InputValidationError
from graft.results import is_one_word
from graft.text import split_sentences


def is_outside(record: dict[str, Any]) -> bool:
    """True for a paper outside the corpus (it has a title or abstract, or no id), False for a
    corpus paper given by its id alone."""
    return record.get("id") is None or bool(record.get("title") or record.get("abstract"))


def record_from_text(text: str) -> dict[str, Any]:
    """`"Title. Abstract..."` -> a record: the first sentence is the title, the rest the abstract."""
    text = " ".join(text.split())
    if not text:
        raise InputValidationError("query text is empty; pass --text \"Title. Abstract ...\"")
    sents = split_sentences(text)
    title = sents[0] if sents else text
    abstract = " ".join(sents[1:]) or title
    return {"id": "query", "title": title, "abstract": abstract}


def record_problem(record: Any) -> str | None:
    """Why `record` is not a query `graft query` can answer, or None when it is one.

    A query is a JSON object with the `id` of a corpus paper, or a paper's `title` and/or `abstract`
    (strings), optionally with `references` (a list of paper ids) and an `id`. An id is one word: it
    names the query in TREC run files, whose fields are separated by whitespace.
    """
    if not isinstance(record, dict):
        return f"a query must be a JSON object, got {type(record).__name__}"
    pid = record.get("id")
    if pid is not None:
        if isinstance(pid, bool) or not isinstance(pid, str | int):
            return f"'id' must be a string, got {type(pid).__name__} {pid!r:.40}"
        if not is_one_word(str(pid)):
            return f"'id' {str(pid)!r:.60} must be one word, without spaces (a query's id in TREC run files)"
    for name in ("title", "abstract"):
        if record.get(name) is not None and not isinstance(record[name], str):
            return f"'{name}' must be a string, got {type(record[name]).__name__} {record[name]!r:.40}"
    refs = record.get("references")
    if refs is not None and (not isinstance(refs, list) or not all(isinstance(r, str) for r in refs)):
        return f"'references' must be a list of paper ids (strings), got {refs!r:.60}"
    if pid is None and not (record.get("title") or record.get("abstract")):
        return "give the 'id' of a corpus paper, or a paper's 'title' and/or 'abstract'"
    return None


def read_record(path: str | Path) -> dict[str, Any]:
    """A query as one JSON object, as a `graft query --queries` line takes it: a paper with `title`
    and/or `abstract` (optional id, references, full_text), or a corpus paper by its `id` alone; a
    leading byte-order mark is allowed."""
    from graft.jsonio import JSONLimitError, read_json_file

    path = Path(path)
    try:
        rec = read_json_file(path)
    except JSONLimitError:
        raise
    except (OSError, ValueError) as exc:
        raise InputValidationError(f"{path}: cannot read a JSON record ({exc})") from exc
    problem = record_problem(rec)
    if problem is not None:
        raise InputValidationError(f"{path}: {problem} (a JSON object with 'title' and/or 'abstract'; "
                                   "optional: id, references, full_text)")
    return rec
