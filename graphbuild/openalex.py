"""The OpenAlex works format: a snapshot's gzipped JSON lines read as a stream, a field's slice taken on the way.

OpenAlex (https://docs.openalex.org, "Work object" and "Snapshot data format") publishes its works as
gzip-compressed JSON lines, one Work object a line, partitioned as `data/works/updated_date=*/part_*.gz`.
A work's abstract comes as `abstract_inverted_index` (word -> its positions), its citations as
`referenced_works` (OpenAlex ids), its field as `concepts`, `topics` and `primary_topic` (topic,
subfield, field, domain). Works merged into others are listed in the snapshot's
`data/merged_ids/works/*.csv.gz` (`merge_date,id,merge_into_id`).

`write_slice` reads the stream twice and holds no more than the slice's ids: the first pass keeps the
ids of the works that pass the filter and carry a title and an abstract (memory O(ids)), the second
writes those works as corpus records (JSON lines) whose references are kept where the cited work is
in the slice (after following merges); `graphbuild.corpus.load_corpus` loads that file as any other.
`iter_openalex` is the one-pass stream of converted records for engines that write their own shards
(references unfiltered).

A corpus argument selects this reader as `openalex:PATH[?KEY=VALUE&...]` (`parse_openalex_spec`), or by
its layout: a folder of `updated_date=*` partitions or `*.gz` part files, or one `part_*.gz` file.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from graft.errors import InputValidationError

#: Prefix of a corpus argument naming an OpenAlex works file or folder, with an optional slice filter.
SPEC_PREFIX = "openalex:"
#: Filter keys of `openalex:PATH?KEY=VALUE`, each with the Work field it tests (the OpenAlex API's filter name).
FILTER_KEYS = {
    "concept": "concepts.id",
    "topic": "topics.id",
    "subfield": "primary_topic.subfield.id",
    "field": "primary_topic.field.id",
    "domain": "primary_topic.domain.id",
    "year": "publication_year",
}
_OPENALEX_ID = re.compile(r"^(?:https?://openalex\.org/)?([WAICSTPF]\d+)$", re.IGNORECASE)
_ARXIV_URL = re.compile(r"arxiv\.org/(?:abs|pdf)/([^?#\s]+?)(?:v\d+)?(?:\.pdf)?$", re.IGNORECASE)
_DOI_PREFIX = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:)", re.IGNORECASE)


@dataclass(frozen=True)
class WorksFilter:
    """A field's slice of the works: every given criterion must hold (AND); the ids given for one
    criterion are alternatives (OR), as `|` in the OpenAlex API's filters.

    Ids are compared by their last path segment, so "C41008148", "https://openalex.org/C41008148",
    "17" and "https://openalex.org/fields/17" all work.
    """

    concepts: frozenset[str] = frozenset()  # any of the work's `concepts` (any level)
    topics: frozenset[str] = frozenset()  # any of the work's `topics`
    subfields: frozenset[str] = frozenset()  # the primary topic's subfield
    fields: frozenset[str] = frozenset()  # the primary topic's field (26 in OpenAlex: 17 = Computer Science)
    domains: frozenset[str] = frozenset()  # the primary topic's domain
    year_from: int | None = None  # publication_year >= year_from
    year_to: int | None = None  # publication_year <= year_to

    def accepts(self, work: dict) -> bool:
        """Whether a Work object is in the slice (a work without the tested field is not)."""
        if self.year_from is not None or self.year_to is not None:
            year = work.get("publication_year")
            if not isinstance(year, int) or isinstance(year, bool):
                return False
            if (self.year_from is not None and year < self.year_from) or (
                    self.year_to is not None and year > self.year_to):
                return False
        if self.concepts and not self.concepts & _ids(work.get("concepts")):
            return False
        if self.topics and not self.topics & _ids(work.get("topics")):
            return False
        primary = work.get("primary_topic") if isinstance(work.get("primary_topic"), dict) else {}
        for wanted, level in ((self.subfields, "subfield"), (self.fields, "field"), (self.domains, "domain")):
            if wanted and not wanted & _ids([primary.get(level)]):
                return False
        return True

    def describe(self) -> dict[str, Any]:
        """The criteria given, as a JSON-ready dict (for the load report)."""
        out: dict[str, Any] = {name: sorted(getattr(self, name)) for name in
                               ("concepts", "topics", "subfields", "fields", "domains") if getattr(self, name)}
        if self.year_from is not None or self.year_to is not None:
            out["years"] = [self.year_from, self.year_to]
        return out


@dataclass
class OpenAlexCounts:
    """What a read of OpenAlex works saw, beyond the corpus's own load report."""

    files: int = 0
    works: int = 0  # Work objects read (valid JSON objects)
    outside_filter: int = 0  # works the slice filter left out
    no_title: int = 0  # works in the slice without a title
    no_abstract: int = 0  # works in the slice without an abstract (no abstract_inverted_index)
    merged_records: int = 0  # records of works listed as merged into another (left out)
    duplicates: int = 0  # later copies of a work already read (a re-synced partition), left out
    merged_references: int = 0  # references that named a merged work and were redirected to its target
    dropped_references: int = 0  # references to works outside the slice, without an abstract or in no file
    bad_lines: list[dict[str, str]] = field(default_factory=list)  # lines skipped under skip_bad: where, reason
    filter: dict[str, Any] = field(default_factory=dict)


def short_id(value: Any) -> str | None:
    """The key of an OpenAlex id ("https://openalex.org/W2741809807" -> "W2741809807"); None if not one."""
    if not isinstance(value, str):
        return None
    m = _OPENALEX_ID.match(value.strip())
    return m.group(1).upper() if m else None


def abstract_text(inverted: Any) -> str | None:
    """The abstract from an `abstract_inverted_index` (word -> positions): each word placed at each
    of its positions, the words joined by single spaces in position order (a position given to two
    words keeps both, in the index's order). None for a missing, empty or malformed index."""
    if not isinstance(inverted, dict) or not inverted:
        return None
    placed: list[tuple[int, int, str]] = []
    for order, (word, positions) in enumerate(inverted.items()):
        if not isinstance(word, str) or not isinstance(positions, list):
            return None
        for pos in positions:
            if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
                return None
            placed.append((pos, order, word))
    placed.sort()
    text = " ".join(word for _, _, word in placed).strip()
    return text or None


def parse_openalex_spec(spec: str) -> tuple[Path, WorksFilter]:
    """`openalex:PATH[?KEY=VALUE&...]` -> (PATH, filter). Keys: `FILTER_KEYS`; a value's alternatives
    are separated by `|` (ids) and a year is `2020`, `2015-2020`, `2015-` or `-2020`.

    Raises:
        InputValidationError: an unknown key, an empty value or a malformed year range.
    """
    body = spec[len(SPEC_PREFIX):] if spec.startswith(SPEC_PREFIX) else spec
    path, _, query = body.partition("?")
    if not path:
        raise InputValidationError(f"{spec!r}: no path after '{SPEC_PREFIX}' (e.g. openalex:data/works?field=17)")
    values: dict[str, set[str]] = {}
    years: tuple[int | None, int | None] = (None, None)
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in FILTER_KEYS:
            raise InputValidationError(f"{spec!r}: unknown OpenAlex filter {key!r}; allowed: {', '.join(FILTER_KEYS)}")
        if not value.strip():
            raise InputValidationError(f"{spec!r}: empty value for {key!r}")
        if key == "year":
            years = _year_range(value, spec)
        else:
            values.setdefault(key, set()).update(_segment(v) for v in value.split("|") if v.strip())
    return Path(path), WorksFilter(
        concepts=frozenset(values.get("concept", ())), topics=frozenset(values.get("topic", ())),
        subfields=frozenset(values.get("subfield", ())), fields=frozenset(values.get("field", ())),
        domains=frozenset(values.get("domain", ())), year_from=years[0], year_to=years[1])


def is_openalex(path: str | Path) -> bool:
    """Whether a corpus argument names OpenAlex works: the `openalex:` prefix, a folder holding
    `updated_date=*` partitions or `*.gz` part files (not `*.jsonl.gz`), or one `part_*.gz` file."""
    text = str(path)
    if text.startswith(SPEC_PREFIX):
        return True
    p = Path(text)
    if p.is_file():
        return p.name.lower().startswith("part_") and p.name.lower().endswith(".gz")
    if p.is_dir():
        return any(p.glob("updated_date=*")) or any(
            f.is_file() and not f.name.lower().endswith(".jsonl.gz") for f in p.glob("*.gz"))
    return False


def work_files(path: Path) -> list[Path]:
    """The `*.gz` files of a works folder (its `updated_date=*` partitions, or itself): partitions
    newest first, files in name order within one; or the one file given.

    Raises:
        InputValidationError: the path is missing or holds no `*.gz` file.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputValidationError(f"OpenAlex works not found: {path} (a works folder, e.g. "
                                   "openalex-snapshot/data/works, or one of its part_*.gz files)")
    files = [f for f in path.rglob("*.gz") if f.is_file() and "merged_ids" not in f.parts]
    # newest partition first, so that the copy of a work read first is its latest (updated_date=YYYY-MM-DD)
    by_dir: dict[Path, list[Path]] = {}
    for f in files:
        by_dir.setdefault(f.parent, []).append(f)
    files = [f for d in sorted(by_dir, key=str, reverse=True) for f in sorted(by_dir[d])]
    if not files:
        raise InputValidationError(f"{path}: no *.gz files of OpenAlex works (expected updated_date=*/part_*.gz)")
    return files


def merged_ids(path: Path) -> dict[str, str]:
    """Merged work id -> the id it was merged into, from the snapshot's `merged_ids/works/*.csv.gz`
    found beside or above the works folder (`data/works` -> `data/merged_ids/works`); empty if none.
    A chain of merges is followed to its end."""
    start = path if path.is_dir() else path.parent
    folder = next((d / "merged_ids" / "works" for d in (start, *start.parents[:3])
                   if (d / "merged_ids" / "works").is_dir()), None)
    merges: dict[str, str] = {}
    if folder is None:
        return merges
    for file in sorted(folder.glob("*.csv.gz")):
        try:
            with gzip.open(file, "rt", encoding="utf-8", newline="") as fh:
                for row in csv.DictReader(fh):
                    old, new = short_id(row.get("id")), short_id(row.get("merge_into_id"))
                    if old and new and old != new:
                        merges[old] = new
        except (OSError, EOFError, zlib.error, csv.Error, UnicodeDecodeError) as exc:
            raise InputValidationError(f"{file}: cannot read the merged ids ({exc})") from None
    for old in list(merges):  # A -> B -> C: A -> C (a cycle stops where it closes)
        seen, target = {old}, merges[old]
        while target in merges and merges[target] not in seen:
            seen.add(target)
            target = merges[target]
        merges[old] = target
    return merges


def work_record(work: dict, merges: dict[str, str] | None = None) -> dict[str, Any]:
    """A corpus record from one Work object: id (the OpenAlex key), title, the rebuilt abstract,
    year, venue (the primary location's source), authors, references (OpenAlex keys, merges
    followed), and `doi`, `url`, `ids` (openalex, doi, arxiv where present). Title or abstract may
    be None (the corpus's validation names them)."""
    merges = merges or {}
    ids = work.get("ids") if isinstance(work.get("ids"), dict) else {}
    doi = _doi(work.get("doi")) or _doi(ids.get("doi"))
    primary = work.get("primary_location") if isinstance(work.get("primary_location"), dict) else {}
    source = primary.get("source") if isinstance(primary.get("source"), dict) else {}
    venue = source.get("display_name")
    if not venue and isinstance(work.get("host_venue"), dict):  # snapshots before 2023
        venue = work["host_venue"].get("display_name")
    refs = []
    for ref in work.get("referenced_works") or []:
        key = short_id(ref)
        if key:
            refs.append(merges.get(key, key))
    title = work.get("title") if isinstance(work.get("title"), str) and work["title"].strip() else None
    return {
        "id": short_id(work.get("id")) or work.get("id"),
        "title": title or work.get("display_name"),
        "abstract": abstract_text(work.get("abstract_inverted_index")),
        "year": work.get("publication_year"),
        "venue": venue if isinstance(venue, str) else None,
        "authors": _authors(work.get("authorships")),
        "references": refs,
        "doi": doi,
        "url": primary.get("landing_page_url") or (f"https://doi.org/{doi}" if doi else None),
        "ids": {k: v for k, v in (("openalex", short_id(work.get("id"))), ("doi", doi),
                                   ("arxiv", _arxiv(work, ids))) if v},
    }


def iter_openalex(path: str | Path, works_filter: WorksFilter | None = None,
                  counts: OpenAlexCounts | None = None, *, skip_bad: bool = False) -> Iterator[tuple[str, dict]]:
    """One pass over OpenAlex works: (where, corpus record) for each work in the slice with a title
    and an abstract, references unfiltered (merges followed). `counts`, when given, is filled as the
    stream goes.

    Raises:
        InputValidationError: a line that is no JSON object (without `skip_bad`; with it, the line
            is listed in `counts.bad_lines`), or an unreadable file.
    """
    path = Path(path)
    works_filter = works_filter or WorksFilter()
    counts = counts if counts is not None else OpenAlexCounts()
    counts.filter = works_filter.describe()
    merges = merged_ids(path)
    files = work_files(path)
    counts.files = len(files)
    for file in files:
        for where, work in _lines(file, _where(file, path)):
            if not isinstance(work, dict):
                problem = work if isinstance(work, str) else f"expected a JSON object, got {type(work).__name__}"
                if not skip_bad:
                    raise InputValidationError(f"{where}: {problem}; pass --skip-bad to skip such records")
                counts.bad_lines.append({"where": where, "reason": problem})
                continue
            counts.works += 1
            if short_id(work.get("id")) in merges:
                counts.merged_records += 1
            elif not works_filter.accepts(work):
                counts.outside_filter += 1
            else:
                rec = work_record(work, merges)
                counts.merged_references += sum(short_id(r) in merges for r in work.get("referenced_works") or [])
                if not _text(rec["title"]):
                    counts.no_title += 1
                elif not _text(rec["abstract"]):
                    counts.no_abstract += 1
                else:
                    yield where, rec


def write_slice(path: str | Path, out: str | Path, works_filter: WorksFilter | None = None, *,
                skip_bad: bool = False, limit: int | None = None) -> OpenAlexCounts:
    """The slice's works with a title and an abstract as a JSONL file of corpus records, in stream
    order (`work_files`: newest partition first), the first copy of a work read twice (its latest),
    references kept where the cited work is in the slice. Reads the stream twice and holds only the
    slice's ids: `graphbuild.corpus.load_corpus` then loads the file as any records file.

    Args:
        path: a works folder (`data/works`, with `updated_date=*/part_*.gz`), a folder of part files,
            or one part file.
        out: the JSONL file to write.
        works_filter: the slice (`WorksFilter`); None = every work.
        skip_bad: skip lines that are no JSON object instead of stopping.
        limit: keep only the first `limit` works of the slice.

    Returns:
        What the read saw; `dropped_references` counts the references left out.

    Raises:
        InputValidationError: no works found, or a bad line (without `skip_bad`).
    """
    path, out = Path(path), Path(out)
    # pass 1: the slice's ids, in stream order (first copy wins), up to `limit`
    kept: set[str] = set()
    for _, rec in iter_openalex(path, works_filter, skip_bad=skip_bad):
        kept.add(rec["id"])
        if limit is not None and len(kept) >= limit:
            break
    # pass 2: those works' records, their references inside the slice, one copy of each work
    counts = OpenAlexCounts()
    taken: set[str] = set()
    with open(out, "w", encoding="utf-8") as fh:
        for _, rec in iter_openalex(path, works_filter, counts, skip_bad=skip_bad):
            if rec["id"] not in kept:
                continue  # past `limit`
            if rec["id"] in taken:
                counts.duplicates += 1
                continue
            taken.add(rec["id"])
            refs = [r for r in rec["references"] if r in kept]
            counts.dropped_references += len(rec["references"]) - len(refs)
            fh.write(json.dumps({**rec, "references": refs}, ensure_ascii=False) + "\n")
    return counts


def _lines(file: Path, name: str) -> Iterator[tuple[str, Any]]:
    """(where, parsed object, or a problem string) per non-blank line of a gzipped (or plain) JSON lines file."""
    opener = gzip.open if file.name.lower().endswith(".gz") else open
    try:
        with opener(file, "rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        yield f"{name} line {lineno}", json.loads(line)
                    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                        yield f"{name} line {lineno}", f"invalid JSON ({exc})"
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: a damaged .gz
        raise InputValidationError(f"{file}: cannot read the file ({exc})") from None


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _where(file: Path, root: Path) -> str:
    try:
        return str(file.relative_to(root)) if root.is_dir() else file.name
    except ValueError:
        return file.name


def _segment(value: str) -> str:
    """The last path segment of an id, upper-cased for entity keys ("https://openalex.org/c41" -> "C41")."""
    key = value.strip().rstrip("/").rsplit("/", 1)[-1]
    return key.upper() if key[:1].isalpha() else key


def _ids(entries: Any) -> set[str]:
    if not isinstance(entries, list):
        return set()
    return {_segment(e["id"]) for e in entries if isinstance(e, dict) and isinstance(e.get("id"), str)}


def _year_range(value: str, spec: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(\d{1,4})?\s*(-)?\s*(\d{1,4})?\s*", value)
    if not m or not (m.group(1) or m.group(3)) or (m.group(2) is None and m.group(3) is not None):
        raise InputValidationError(f"{spec!r}: year {value!r} is not YEAR, FROM-TO, FROM- or -TO (e.g. 2015-2020)")
    lo = int(m.group(1)) if m.group(1) else None
    hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
    if lo is not None and hi is not None and lo > hi:
        raise InputValidationError(f"{spec!r}: year range {value!r} is empty (from {lo} after to {hi})")
    return lo, hi


def _doi(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return _DOI_PREFIX.sub("", value.strip()).lower() or None


def _arxiv(work: dict, ids: dict) -> str | None:
    """The arXiv id: `ids.arxiv` where a record has one, else the arXiv location's landing page."""
    if isinstance(ids.get("arxiv"), str) and ids["arxiv"].strip():
        m = _ARXIV_URL.search(ids["arxiv"])
        return m.group(1) if m else ids["arxiv"].strip()
    for loc in work.get("locations") or []:
        url = loc.get("landing_page_url") if isinstance(loc, dict) else None
        m = _ARXIV_URL.search(url) if isinstance(url, str) else None
        if m:
            return m.group(1)
    return None


def _authors(authorships: Any) -> list[str]:
    names = []
    for a in authorships if isinstance(authorships, list) else []:
        if not isinstance(a, dict):
            continue
        author = a.get("author") if isinstance(a.get("author"), dict) else {}
        name = author.get("display_name") or a.get("raw_author_name")
        if isinstance(name, str) and name.strip():
            names.append(" ".join(name.split()))
    return names


__all__ = ["FILTER_KEYS", "SPEC_PREFIX", "OpenAlexCounts", "WorksFilter", "abstract_text", "is_openalex",
           "iter_openalex", "merged_ids", "parse_openalex_spec", "short_id", "work_files",
           "work_record", "write_slice"]
