"""Corpus loading: JSONL / JSONL.gz / Parquet / JSON records, S2ORC JSON full texts and the ACLSum package.

Every loader returns a `Corpus`: one validated, typed papers table whose row order is the node
index of the graph, the in-corpus citation lists, and a `LoadReport` that says what was read,
skipped and dropped. Bad records stop the load with a message naming file, line and field unless
the caller asks to skip them (`skip_bad`, the CLI's `--skip-bad`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import importlib.util
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from graft import jsonio
from graft.errors import ConfigError, GraftError, InputValidationError
from graft.jsonio import JSONLimitError, iter_lines, loads, read_json_file
from graft.results import is_one_word
from graft.text import normalize_title

#: Columns of `Corpus.papers`, in order.
PAPER_COLUMNS = ("paper_id", "title", "abstract", "year", "venue", "authors", "references", "full_text", "doi", "url",
                 "arxiv")
#: Optional identifiers of a paper outside the corpus (`graft.identifiers`): exports and links out show them.
LINK_COLUMNS = ("doi", "url", "arxiv")
#: Fields every JSONL / Parquet record must carry (non-empty).
REQUIRED_FIELDS = ("id", "title", "abstract")
#: Accepted inputs, as listed in error messages.
ACCEPTED_FORMATS = ("*.jsonl, *.jsonl.gz, *.parquet, a *.json file (an array of records, one record or an S2ORC "
                    "document) or a directory of them, OpenAlex works (openalex:PATH), or 'aclsum'")

SCHEMA: dict[str, Any] = {
    "paper_id": pl.Utf8,
    "title": pl.Utf8,
    "abstract": pl.Utf8,
    "year": pl.Int32,
    "venue": pl.Utf8,
    "authors": pl.List(pl.Utf8),
    "references": pl.List(pl.Utf8),
    "full_text": pl.Utf8,
    "doi": pl.Utf8,
    "url": pl.Utf8,
    "arxiv": pl.Utf8,
}
# Bumped whenever the serialisation behind `Corpus.content_hash` changes, so old hashes never match.
HASH_VERSION = b"graft-corpus-v1\n"

# ACL Anthology venue letters of old-style ids ("P06-1112"); new-style ids carry the venue in words.
_ACL_LETTERS = {
    "P": "ACL",
    "N": "NAACL",
    "D": "EMNLP",
    "E": "EACL",
    "W": "Workshop",
    "H": "HLT",
    "C": "COLING",
    "Q": "TACL",
    "J": "CL",
    "A": "ANLP",
    "I": "IJCNLP",
    "K": "CoNLL",
    "L": "LREC",
    "S": "SemEval",
}
_ACL_OLD_ID = re.compile(r"([A-Z])(\d{2})-\d{4}")
_ACL_NEW_ID = re.compile(r"(\d{4})\.([a-z0-9]+(?:-[a-z0-9]+)*)\.\d+")


@dataclass
class BadRecord:
    """A record skipped under `skip_bad`."""

    where: str  # e.g. "corpus.jsonl line 812"
    reason: str


@dataclass
class LoadReport:
    """What a load read, kept, skipped and dropped (written to the manifest and the summary table)."""

    source: str
    n_read: int
    n_loaded: int
    skipped: list[BadRecord]  # records skipped under skip_bad
    dropped_references: int  # references to ids not in the corpus (or unresolved bib titles), dropped
    resolved_references: int  # references kept (edges)
    self_references: int = 0  # references of a paper to itself, removed
    duplicate_references: int = 0  # repeated references within one paper, removed
    details: dict[str, Any] = dataclasses.field(default_factory=dict)  # a format's own counts (e.g. "openalex")

    def as_dict(self) -> dict:
        """A JSON-ready dict of the report (skipped records as `{where, reason}` dicts)."""
        return dataclasses.asdict(self)


@dataclass
class Corpus:
    """A validated corpus; row i of `papers` is node i of every graph built from it."""

    papers: pl.DataFrame  # columns PAPER_COLUMNS, dtypes as in `SCHEMA`
    report: LoadReport

    def citations(self) -> pl.DataFrame:
        """Citation edges: columns `citing, cited` (Utf8), one row per kept reference, in row order."""
        return (
            self.papers.select(pl.col("paper_id").alias("citing"), pl.col("references").alias("cited"))
            .explode("cited")
            .drop_nulls("cited")  # papers without references explode to a null row
        )

    def content_hash(self) -> str:
        """sha256 hex digest of the papers table, independent of the input's row order.

        Rows are serialised as canonical JSON sorted by paper_id, and each reference list is sorted,
        since references are a set; author order is kept because it is content. A paper's identifiers
        (`LINK_COLUMNS`) are appended only where it has one, so a corpus without them hashes as it
        did before they existed (its indexes stay up to date).
        """
        digest = hashlib.sha256(HASH_VERSION)
        for _, text in sorted(canonical_rows(self.papers)):
            digest.update(text.encode())
            digest.update(b"\n")
        return digest.hexdigest()


def canonical_rows(papers: pl.DataFrame) -> list[tuple[str, str]]:
    """(paper_id, canonical JSON of the row) per paper, as `Corpus.content_hash` digests them."""
    out = []
    n_plain = len(PAPER_COLUMNS) - len(LINK_COLUMNS)
    for row in papers.select(PAPER_COLUMNS).iter_rows():
        values = list(row[:n_plain])
        values[6] = sorted(values[6] or [])
        if any(v is not None for v in row[n_plain:]):
            values.append(dict(zip(LINK_COLUMNS, row[n_plain:])))
        out.append((row[0], json.dumps(values, ensure_ascii=False, separators=(",", ":"))))
    return out


class _Bad(Exception):
    """A problem with one record (internal; becomes an InputValidationError or a BadRecord);
    `required`: it concerns a required field (the error then lists them)."""

    def __init__(self, message: str, required: bool = False) -> None:
        super().__init__(message)
        self.required = required


# --------------------------------------------------------------------------- entry points


def load_corpus(path: str | Path | None, *, skip_bad: bool = False, limit: int | None = None) -> Corpus:
    """Load a corpus from a file, a directory of JSON files (S2ORC or plain records), or the ACLSum package.

    Args:
        path: `None` or "aclsum" for the built-in ACLSum corpus; a `*.jsonl`, `*.jsonl.gz` or
            `*.parquet` file of records (`id, title, abstract` required; `year, venue, authors,
            references, full_text, doi, url, arxiv` optional); a `*.json` file or a directory of them, each an S2ORC
            document, a plain record or a JSON array of records.
        skip_bad: skip invalid records (listed in `report.skipped`) instead of stopping.
        limit: keep only the first `limit` valid records; references to later ones are dropped.

    Returns:
        The corpus, in file order (JSONL / Parquet / a JSON array) or sorted file-name order (a directory).

    Raises:
        InputValidationError: the path is missing or of an unknown format, a record is invalid
            (without `skip_bad`), or no record could be loaded.
    """
    if path is None or str(path) == "aclsum":
        return load_aclsum(limit=limit)
    _check_limit(limit)
    from graphbuild import openalex  # OpenAlex works: `openalex:PATH?FILTER` or a snapshot's works folder

    if openalex.is_openalex(path):
        return _load_openalex(str(path), skip_bad=skip_bad, limit=limit)
    path = Path(path)
    if not path.exists():
        raise InputValidationError(f"corpus not found: {path} (accepted: {ACCEPTED_FORMATS})")
    name = path.name.lower()
    if path.is_dir():
        return _load_json(path, source=str(path), skip_bad=skip_bad, limit=limit)
    if name.endswith((".jsonl", ".jsonl.gz")):
        items: Iterator[tuple[str, Any]] = iter_jsonl(path)
    elif name.endswith(".parquet"):
        items = iter_parquet(path)
    elif name.endswith(".json"):
        return _load_json(path, source=str(path), skip_bad=skip_bad, limit=limit)
    else:
        raise InputValidationError(f"{path}: unknown corpus format (accepted: {ACCEPTED_FORMATS})")
    with contextlib.closing(items):
        records, n_read, skipped = _collect(items, skip_bad=skip_bad, limit=limit)
    return _build(str(path), records, n_read, skipped)


def load_aclsum(*, limit: int | None = None) -> Corpus:
    """Load the 250 ACL papers with full text shipped by the `aclsum` package (the demo corpus).

    Args:
        limit: keep only the first `limit` papers in sorted file-name order.

    Returns:
        The corpus with source "aclsum"; ids are the ACL Anthology ids (file names).

    Raises:
        GraftError: the `aclsum` package is not installed or lacks its paper files.
    """
    _check_limit(limit)
    # find_spec locates the package without importing it (and its dependencies).
    spec = importlib.util.find_spec("aclsum")
    if spec is None or not spec.submodule_search_locations:
        raise GraftError("the ACLSum corpus needs the `aclsum` package: pip install aclsum")
    folder = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "paper_jsons"
    if not any(folder.glob("*.json")):
        raise GraftError(f"the `aclsum` package has no paper files in {folder}; reinstall it")
    return _load_json(folder, source="aclsum", skip_bad=False, limit=limit)


# --------------------------------------------------------------------------- readers


def _load_openalex(spec: str, *, skip_bad: bool, limit: int | None) -> Corpus:
    """OpenAlex works (`graphbuild.openalex`): the slice written as records by two streaming passes,
    then loaded as a records file; the report names the works and counts what the reader left out."""
    import tempfile

    from graphbuild import openalex

    path, works_filter = openalex.parse_openalex_spec(spec)
    with tempfile.TemporaryDirectory(prefix="graft-openalex-") as tmp:
        records = Path(tmp) / "openalex-slice.jsonl"
        counts = openalex.write_slice(path, records, works_filter, skip_bad=skip_bad, limit=limit)
        if not records.stat().st_size:
            raise InputValidationError(f"{spec}: no works with a title and an abstract in the slice "
                                       f"({counts.works} works read, {counts.outside_filter} outside the filter, "
                                       f"{counts.no_abstract} without an abstract)")
        corpus = load_corpus(records, skip_bad=skip_bad)
    add_openalex_counts(corpus.report, spec, counts)
    return corpus


def add_openalex_counts(report: LoadReport, spec: str, counts: Any) -> None:
    """The OpenAlex reader's counts (`openalex.SliceCounts`) added to the load report of its slice."""
    report.source, report.n_read = spec, report.n_read + len(counts.bad_lines)
    report.skipped = [BadRecord(**bad) for bad in counts.bad_lines] + report.skipped
    report.dropped_references += counts.dropped_references
    report.details["openalex"] = dataclasses.asdict(counts)


def iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """Yield (where, parsed object or _Bad) per non-blank line."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            for lineno, line in iter_lines(fh, jsonio.MAX_LINE_BYTES):
                where = f"{path.name} line {lineno}"
                if line is None:
                    yield where, _Bad(f"the line is longer than {jsonio.MAX_LINE_BYTES:,} bytes (the most GRAFT "
                                      "reads as one record)")
                    continue
                if not line.strip():
                    continue  # blank lines (e.g. a trailing newline) are not records
                try:
                    yield where, loads(line, where)
                except JSONLimitError as exc:
                    yield where, _Bad(str(exc).removeprefix(f"{where}: "))
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                    yield where, _Bad(f"invalid JSON ({exc})")
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: a damaged .gz
        raise InputValidationError(f"{path}: cannot read the file ({exc})") from None


def iter_parquet(path: Path, batch_rows: int = 4096) -> Iterator[tuple[str, Any]]:
    """Yield (where, row dict) per Parquet row, one record batch of the file in memory at a time."""
    import pyarrow.parquet as pq

    try:
        reader = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a broken file
        raise InputValidationError(f"{path}: not a readable Parquet file ({exc})") from None
    i = 0
    for batch in reader.iter_batches(batch_size=batch_rows):
        for row in batch.to_pylist():
            i += 1
            yield f"{path.name} row {i}", row


def _load_json(path: Path, *, source: str, skip_bad: bool, limit: int | None) -> Corpus:
    """Load one JSON file or a directory of them: S2ORC documents, whose bib entries resolve by normalised
    title, plain records, whose references are ids, or JSON arrays of plain records."""
    files = sorted((p for p in path.glob("*.json") if p.is_file()), key=lambda p: p.name) if path.is_dir() else [path]
    if not files:
        raise InputValidationError(
            f"{path}: no *.json files in the directory (accepted: {ACCEPTED_FORMATS})"
        )

    def items() -> Iterator[tuple[str, Any]]:
        for file in files:
            try:
                obj = read_json_file(file)
            except JSONLimitError as exc:
                obj = _Bad(str(exc).removeprefix(f"{file}: "))
            except ValueError as exc:
                obj = _Bad(f"invalid JSON ({exc})")
            except OSError as exc:
                obj = _Bad(f"cannot read the file ({exc.strerror or exc})")
            if isinstance(obj, list):  # a JSON array of plain records
                yield from ((f"{file.name} item {i}", rec) for i, rec in enumerate(obj, start=1))
            elif isinstance(obj, dict) and _is_s2orc(obj):
                yield file.name, _from_s2orc(file.stem, obj)
            else:  # a plain record (its own id and reference ids), or what _validate names
                yield file.name, obj

    records, n_read, skipped = _collect(items(), skip_bad=skip_bad, limit=limit)
    # Resolve bibliography titles against the loaded papers only (after `limit`): the first paper
    # with a given normalised title wins, so a duplicate title cannot make the result order-dependent.
    by_title: dict[str, str] = {}
    for rec in records:
        by_title.setdefault(normalize_title(rec["title"]), rec["paper_id"])
    unresolved = 0
    for rec in records:
        if "_ref_titles" not in rec:
            continue  # a plain record: its references are ids, checked by _build
        keys = [normalize_title(t) for t in rec.pop("_ref_titles")]
        rec["references"] = [by_title[k] for k in keys if k and k in by_title]
        unresolved += len(keys) - len(rec["references"])
    return _build(source, records, n_read, skipped, dropped=unresolved)


def _is_s2orc(obj: dict) -> bool:
    """An S2ORC document has a `pdf_parse` block or, in its metadata-only form, a `paper_id` and no `id`;
    an object with an `id` and no `pdf_parse` is a plain record."""
    return "pdf_parse" in obj or "id" not in obj


def _from_s2orc(stem: str, obj: dict) -> dict:
    """Map an S2ORC document to a plain record (id = file stem; the JSON `paper_id` is unreliable)."""
    parse = obj.get("pdf_parse") if isinstance(obj.get("pdf_parse"), dict) else {}
    abstract = "\n\n".join(_paragraphs(parse.get("abstract"))) or obj.get("abstract")
    full_text = "\n\n".join(_paragraphs(parse.get("body_text"))) or None
    bib = parse.get("bib_entries") if isinstance(parse.get("bib_entries"), dict) else {}
    # Entries without a usable title stay in the list (as "") so they count as unresolved.
    ref_titles = [
        e.get("title") if isinstance(e, dict) and isinstance(e.get("title"), str) else ""
        for e in bib.values()
    ]
    id_year, id_venue = acl_id_year_venue(stem)
    try:
        year = _as_year(obj.get("year"))
    except _Bad:
        year = None  # S2ORC years are often "" or junk; the id is then the better source
    venue = obj.get("venue") if isinstance(obj.get("venue"), str) and obj["venue"].strip() else None
    return {
        "id": stem,
        "title": obj.get("title"),
        "abstract": abstract,
        "year": year or id_year,
        "venue": venue or id_venue,
        "authors": obj.get("authors"),
        "references": [],
        "full_text": full_text,
        "_ref_titles": ref_titles,
        "_id_from_file_name": True,
    }


def _paragraphs(blocks: Any) -> list[str]:
    if not isinstance(blocks, list):
        return []
    texts = (b.get("text") for b in blocks if isinstance(b, dict))
    return [t.strip() for t in texts if isinstance(t, str) and t.strip()]


def acl_id_year_venue(paper_id: str) -> tuple[int | None, str | None]:
    """Year and venue encoded in an ACL Anthology id.

    "P06-1112" -> (2006, "ACL"), "W99-0615" -> (1999, "Workshop"),
    "2020.aacl-main.33" -> (2020, "AACL"), "2021.findings-acl.5" -> (2021, "Findings of ACL").

    Args:
        paper_id: an ACL Anthology id, or any other id.

    Returns:
        (year, venue), each None when the id does not say.
    """
    if m := _ACL_OLD_ID.fullmatch(paper_id):
        yy = int(m.group(2))
        return (1900 + yy if yy >= 50 else 2000 + yy), _ACL_LETTERS.get(m.group(1))
    if m := _ACL_NEW_ID.fullmatch(paper_id):
        parts = m.group(2).split("-")
        venue = (
            f"Findings of {parts[1].upper()}"
            if parts[0] == "findings" and len(parts) > 1
            else parts[0].upper()
        )
        return int(m.group(1)), venue
    return None, None


# --------------------------------------------------------------------------- validation


def _collect(
    items: Iterable[tuple[str, Any]], *, skip_bad: bool, limit: int | None
) -> tuple[list[dict], int, list[BadRecord]]:
    """Validate records in order, reject duplicates, stop after `limit` valid ones.

    Returns:
        (valid records, number of records read, skipped records).
    """
    reading = Reading()
    records = list(valid_records(items, skip_bad=skip_bad, limit=limit, reading=reading))
    return records, reading.n_read, reading.skipped


@dataclass
class Reading:
    """What `valid_records` has read so far: records read, the skipped ones, where each id was first."""

    n_read: int = 0
    skipped: list[BadRecord] = field(default_factory=list)
    first_seen: dict[str, str] = field(default_factory=dict)


def valid_records(items: Iterable[tuple[str, Any]], *, skip_bad: bool, limit: int | None,
                  reading: Reading) -> Iterator[dict]:
    """The valid records of `items` ((where, parsed object) pairs) in order, duplicates rejected,
    stopping after `limit`; `reading` is updated as they stream.

    Raises:
        InputValidationError: an invalid record or a duplicate id without `skip_bad`.
    """
    loaded = 0
    for where, raw in items:
        reading.n_read += 1
        try:
            if isinstance(raw, _Bad):
                raise raw
            rec = _validate(raw)
            if rec["paper_id"] in reading.first_seen:
                raise _Bad(f"duplicate id {rec['paper_id']!r} (first at {reading.first_seen[rec['paper_id']]})")
        except _Bad as bad:
            if not skip_bad:
                required = f" (required: {', '.join(REQUIRED_FIELDS)})" if bad.required else ""
                raise InputValidationError(f"{where}: {bad}{required}; pass --skip-bad to skip such records") from None
            reading.skipped.append(BadRecord(where=where, reason=str(bad)))
            continue
        reading.first_seen[rec["paper_id"]] = where
        yield rec
        loaded += 1
        if limit is not None and loaded >= limit:
            break


def _validate(raw: Any) -> dict:
    """Check one record's fields and return it normalised to the `PAPER_COLUMNS` keys."""
    if not isinstance(raw, dict):
        raise _Bad(f"expected a JSON object, got {type(raw).__name__}")
    problems: list[str] = []
    # `paper_id` is accepted for `id` so that an index's own papers.parquet loads back.
    pid = raw.get("id", raw.get("paper_id"))
    if isinstance(pid, int) and not isinstance(pid, bool):
        pid = str(pid)
    rec: dict[str, Any] = {"paper_id": _required_text(pid, "id", problems)}
    if rec["paper_id"] and not is_one_word(rec["paper_id"]):
        problems.append(f"'id' {rec['paper_id']!r:.60} must be one word, without spaces (it is a field of TREC run "
                        "files and of --queries lines)" + ("; an S2ORC document's id is its file name: rename the file"
                                                           if raw.get("_id_from_file_name") else ""))
    rec["title"] = _required_text(raw.get("title"), "title", problems)
    rec["abstract"] = _required_text(raw.get("abstract"), "abstract", problems)
    required = bool(problems)
    for name, check in (
        ("year", _as_year),
        ("venue", _as_optional_text),
        ("full_text", _as_optional_text),
        ("doi", _as_optional_text),
        ("url", _as_optional_text),
        ("arxiv", _as_optional_text),
        ("authors", _as_authors),
        ("references", _as_references),
    ):
        try:
            rec[name] = check(raw.get(name))
        except _Bad as bad:
            problems.append(f"'{name}' {bad}")
    if problems:
        raise _Bad("; ".join(problems), required=required)
    if "_ref_titles" in raw:
        rec["_ref_titles"] = raw["_ref_titles"]
    return rec


def _required_text(value: Any, name: str, problems: list[str]) -> str:
    if value is None:
        problems.append(f"missing '{name}'")
    elif not isinstance(value, str):
        problems.append(f"'{name}' must be a string, got {type(value).__name__} {value!r:.40}")
    elif not value.strip():
        problems.append(f"empty '{name}'")
    else:
        return value.strip()
    return ""


def _as_year(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None  # NaN is how pandas-written Parquet files spell a missing integer
    if isinstance(value, str):
        if not value.strip():
            return None
        if re.fullmatch(r"\s*\d{1,4}\s*", value):
            value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 9999:
        return value
    raise _Bad(f"must be an integer year, got {value!r:.40}")


def _as_optional_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Bad(f"must be a string, got {type(value).__name__} {value!r:.40}")
    return value.strip() or None


def _as_authors(value: Any) -> list[str]:
    """Authors as "First Middle Last" strings; S2ORC-style name dicts are joined."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"must be a list of strings, got {type(value).__name__} {value!r:.40}")
    names = []
    for author in value:
        if isinstance(author, dict):
            middle = author.get("middle") or []
            parts = [
                author.get("first"),
                *(middle if isinstance(middle, list) else [middle]),
                author.get("last"),
            ]
            name = " ".join(p.strip() for p in parts if isinstance(p, str) and p.strip()) or author.get(
                "name"
            )
        elif isinstance(author, str):
            name = author
        else:
            raise _Bad(f"must be a list of strings or {{first, middle, last}} objects, got {author!r:.40}")
        if isinstance(name, str) and name.strip():
            names.append(" ".join(name.split()))
    return names


def _as_references(value: Any) -> list[str]:
    if value is None:
        return []
    # integer ids are read as strings, as an integer `id` is
    if not isinstance(value, list) or not all(isinstance(r, str | int) and not isinstance(r, bool) for r in value):
        raise _Bad(f"must be a list of ids (strings or integers), got {value!r:.40}")
    return [str(r).strip() for r in value if str(r).strip()]


# --------------------------------------------------------------------------- assembly


def _build(
    source: str, records: list[dict], n_read: int, skipped: list[BadRecord], dropped: int = 0
) -> Corpus:
    """Keep in-corpus references (deduplicated, no self-citations) and assemble the typed table."""
    if not records:
        raise InputValidationError(
            f"{source}: no papers loaded ({n_read} records read, {len(skipped)} skipped); "
            f"a corpus needs records with non-empty {', '.join(REQUIRED_FIELDS)}"
        )
    ids = {rec["paper_id"] for rec in records}
    counts = {"dropped": dropped, "self": 0, "duplicate": 0, "kept": 0}
    for rec in records:
        rec["references"] = keep_references(rec["paper_id"], rec["references"], ids, counts)
    papers = pl.DataFrame({c: [rec[c] for rec in records] for c in PAPER_COLUMNS}, schema=SCHEMA)
    report = LoadReport(
        source=source,
        n_read=n_read,
        n_loaded=len(records),
        skipped=skipped,
        dropped_references=counts["dropped"],
        resolved_references=counts["kept"],
        self_references=counts["self"],
        duplicate_references=counts["duplicate"],
    )
    return Corpus(papers=papers, report=report)


def keep_references(paper_id: str, references: list[str] | None, ids: set[str] | dict[str, Any],
                    counts: dict[str, int]) -> list[str]:
    """A paper's references to corpus papers (`ids`), each once, never itself; `counts` ("dropped",
    "self", "duplicate", "kept") is added to."""
    seen: set[str] = set()
    keep = []
    for ref in references or []:
        if ref == paper_id:
            counts["self"] += 1
        elif ref not in ids:
            counts["dropped"] += 1
        elif ref in seen:
            counts["duplicate"] += 1
        else:
            seen.add(ref)
            keep.append(ref)
    counts["kept"] += len(keep)
    return keep


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be a positive integer or None, got {limit!r}")
