"""`graft import`: a researcher's library matched to a corpus (an index's, or a corpus file's) and,
where asked, written out as a corpus `graft build` reads: the corpus's own records followed by the
library's entries outside it that carry an abstract (`graft.library.records`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graft.errors import InputValidationError
from graft.library import LibraryEntry, LibraryMatch, Match, match_library, read_library, records
from graft.store import atomic_path, folder_problem

#: Fields of a corpus record written by `write_corpus`, in order (the JSONL format `load_corpus` reads).
RECORD_FIELDS = ("id", "title", "abstract", "year", "venue", "authors", "references", "full_text", "doi", "url",
                 "arxiv")


@dataclass
class ImportResult:
    """What `import_library` found and wrote."""

    match: LibraryMatch
    against: str | None  # the index or corpus matched against (None: none)
    added: list[tuple[LibraryEntry, dict[str, Any]]] = field(default_factory=list)  # entries that are new papers
    no_abstract: list[LibraryEntry] = field(default_factory=list)  # unmatched entries left out: no abstract
    out: Path | None = None
    corpus_papers: int = 0  # the corpus's own papers written before the library's

    def as_dict(self) -> dict[str, Any]:
        return {**self.match.as_dict(), "against": self.against, "out": str(self.out) if self.out else None,
                "corpus_papers": self.corpus_papers, "added": {e.where: r["id"] for e, r in self.added},
                "left_out_no_abstract": [e.where for e in self.no_abstract]}


def import_library(library: str | Path, *, fmt: str | None = None, index: str | Path | None = None,
                   corpus: str | Path | None = None, out: str | Path | None = None,
                   skip_bad: bool = False) -> ImportResult:
    """Read a library, match it to an index's papers (`index`) or a corpus's (`corpus`: a corpus file
    or "aclsum"), and with `out` write a corpus JSONL: the corpus's records (with `corpus`) followed by
    the library's entries that matched no paper and carry a title and an abstract.

    Raises:
        InputValidationError: an unreadable library or corpus, both `index` and `corpus` given, `out`
            with `index` (write the corpus the index was built from with --corpus), or `out` not a
            writable file path.
    """
    if index is not None and corpus is not None:
        raise InputValidationError("match against an index or a corpus, not both (--index or --corpus)")
    if out is not None and index is not None:
        raise InputValidationError("--out writes a corpus: give the corpus the index was built from with --corpus "
                                   "(an index keeps no full texts or references to write back)")
    if out is not None:
        out = Path(out)
        where = out if out.is_dir() else out.parent
        problem = "is a folder" if where == out else folder_problem(where)
        if problem:
            raise InputValidationError(f"--out {out}: {where} {problem}; give the path of a .jsonl file to write")
        if not out.name.lower().endswith(".jsonl"):
            raise InputValidationError(f"--out {out}: a corpus is written as JSONL; name the file *.jsonl")
    lib = read_library(library, fmt)
    papers = None
    against = None
    if index is not None:
        from graft.index import Index

        papers, against = Index.open(index).papers, str(index)
    elif corpus is not None:
        from graphbuild.corpus import load_corpus

        papers, against = load_corpus(corpus, skip_bad=skip_bad).papers, str(corpus)
    if papers is not None:
        match = match_library(lib, papers)
    else:
        match = LibraryMatch(lib, [Match(e) for e in lib.entries])
    taken = set(papers["paper_id"].to_list()) if papers is not None else set()
    added, no_abstract = records(match, taken)
    result = ImportResult(match=match, against=against, added=added, no_abstract=no_abstract)
    if out is not None:
        if not added and papers is None:
            raise InputValidationError(f"{library}: no entry carries a title and an abstract, so none can be a "
                                       "corpus paper; --out writes nothing")
        rows = papers.to_dicts() if corpus is not None else []
        write_corpus(out, rows, [r for _, r in added])
        result.out, result.corpus_papers = out, len(rows)
    return result


def write_corpus(out: Path, rows: list[dict[str, Any]], added: list[dict[str, Any]]) -> None:
    """A corpus JSONL (atomically): `rows` (a corpus table's rows, `paper_id` as `id`), then `added`,
    each with the `RECORD_FIELDS` it has (empty values left out)."""
    with atomic_path(out) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for row in [*rows, *added]:
            rec = {"id": row.get("id", row.get("paper_id")), **row}
            clean = {k: rec[k] for k in RECORD_FIELDS if rec.get(k) not in (None, "", [])}
            fh.write(json.dumps(clean, ensure_ascii=False) + "\n")
