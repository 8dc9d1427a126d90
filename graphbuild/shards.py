"""A corpus as Parquet shards, written while it streams: the input of the distributed build
(`graphbuild.ray_engine`).

`write_shards` reads a corpus record by record (JSON lines, Parquet row groups, an OpenAlex snapshot's
slice), validates each record as `graphbuild.corpus.load_corpus` does, and writes every `shard_papers`
valid records as one Parquet file (`part-00000.parquet`, ...; the corpus table's columns and types,
references as given). Only the ids seen so far stay in memory (for duplicates and for references). A
second pass over the shards keeps each paper's references to papers of the corpus (deduplicated, no
self-citations: the same rules and counts as `load_corpus`) and rewrites the shard. The rows of the
shards in file order are the rows of the corpus `load_corpus` returns for the same input, and
`content_hash` is its `Corpus.content_hash` (an external merge of per-shard sorted rows).

S2ORC folders and JSON files resolve references by title across the whole folder; they (and the
ACLSum demo corpus) are loaded by `load_corpus` first and then cut into shards.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from graft.errors import InputValidationError
from graft.store import atomic_path, read_json, write_json
from graphbuild import corpus as corpus_mod
from graphbuild.corpus import PAPER_COLUMNS, BadRecord, Corpus, LoadReport

#: Papers per shard: the unit a distributed build maps, checkpoints and resumes.
SHARD_PAPERS = 2000

_DONE = "shards.json"


@dataclass
class Shards:
    """The shards of a corpus and how it loaded (`LoadReport` as `load_corpus` gives it)."""

    folder: Path
    files: list[str]
    papers: list[int]
    report: LoadReport
    content_hash: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> list[Path]:
        return [self.folder / f for f in self.files]

    @property
    def n(self) -> int:
        return sum(self.papers)

    def table(self, columns: list[str] | None = None) -> pl.DataFrame:
        """The corpus table (or some of its columns) in row order, read from the shards."""
        return pl.concat([pl.read_parquet(p, columns=columns) for p in self.paths]) if self.files else \
            pl.DataFrame(schema={c: corpus_mod.SCHEMA[c] for c in (columns or PAPER_COLUMNS)})

    def corpus(self) -> Corpus:
        """The whole corpus in memory, as `load_corpus` returns it."""
        return Corpus(papers=self.table(), report=self.report)


def source_signature(path: str | Path | None, skip_bad: bool, limit: int | None, shard_papers: int) -> dict[str, Any]:
    """What decides the shards: the input (path, size and modification time of each file under it),
    the reading settings and the shard size. Equal signatures: the shards on disk are reused."""
    files: list[list[Any]] = []
    if path is not None and str(path) != "aclsum":
        from graphbuild import openalex

        root = Path(openalex.parse_openalex_spec(str(path))[0]) if openalex.is_openalex(path) else Path(path)
        walk = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in walk:
            if f.is_file():
                st = f.stat()
                files.append([str(f), st.st_size, st.st_mtime_ns])
    return {"source": str(path) if path is not None else "aclsum", "files": files, "skip_bad": skip_bad,
            "limit": limit, "shard_papers": shard_papers, "format": 1}


def read_shards(folder: Path, signature: dict[str, Any] | None = None) -> Shards | None:
    """The finished shards in `folder` (with the same `signature` when given), or None."""
    done = folder / _DONE
    if not done.is_file():
        return None
    meta = read_json(done)
    if signature is not None and meta.get("signature") != signature:
        return None
    if not all((folder / f).is_file() for f in meta["files"]):
        return None
    report = LoadReport(**{**meta["report"], "skipped": [BadRecord(**b) for b in meta["report"]["skipped"]]})
    return Shards(folder, meta["files"], meta["papers"], report, meta["content_hash"], meta.get("details", {}))


def _stream(path: str | Path | None, skip_bad: bool, limit: int | None, scratch: Path,
            details: dict[str, Any]) -> tuple[Iterator[tuple[str, Any]] | None, Corpus | None, str]:
    """(raw items, None, source) for the streamed formats; (None, the loaded corpus, source) for
    the ones read whole (S2ORC / JSON folders and files, ACLSum)."""
    from graphbuild import openalex

    if path is None or str(path) == "aclsum":
        return None, corpus_mod.load_aclsum(limit=limit), "aclsum"
    if openalex.is_openalex(path):
        root, works_filter = openalex.parse_openalex_spec(str(path))
        records = scratch / "openalex-slice.jsonl"
        counts = openalex.write_slice(root, records, works_filter, skip_bad=skip_bad, limit=limit)
        details["openalex"] = counts
        return corpus_mod.iter_jsonl(records), None, str(path)
    p = Path(path)
    if not p.exists():
        raise InputValidationError(f"corpus not found: {p} (accepted: {corpus_mod.ACCEPTED_FORMATS})")
    name = p.name.lower()
    if p.is_dir() or name.endswith(".json"):
        return None, corpus_mod.load_corpus(p, skip_bad=skip_bad, limit=limit), str(p)
    if name.endswith((".jsonl", ".jsonl.gz")):
        return corpus_mod.iter_jsonl(p), None, str(p)
    if name.endswith(".parquet"):
        return corpus_mod.iter_parquet(p), None, str(p)
    raise InputValidationError(f"{p}: unknown corpus format (accepted: {corpus_mod.ACCEPTED_FORMATS})")


def write_shards(path: str | Path | None, folder: str | Path, *, skip_bad: bool = False, limit: int | None = None,
                 shard_papers: int = SHARD_PAPERS, progress: Any = None) -> Shards:
    """The corpus at `path` as Parquet shards in `folder` (reused when a finished set with the same
    input and settings is there). `progress` is called with the number of papers written.

    Raises:
        InputValidationError: as `load_corpus` (a bad record without `skip_bad`, no papers).
    """
    folder = Path(folder)
    signature = source_signature(path, skip_bad, limit, shard_papers)
    found = read_shards(folder, signature)
    if found is not None:
        if progress is not None:
            progress(found.n)
        return found
    if shard_papers < 1:
        raise InputValidationError(f"shard_papers must be >= 1, got {shard_papers}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / _DONE).unlink(missing_ok=True)
    for old in folder.glob("part-*.parquet"):
        old.unlink()
    details: dict[str, Any] = {}
    items, whole, source = _stream(path, skip_bad, limit, folder, details)
    files: list[str] = []
    sizes: list[int] = []
    buffer: list[dict] = []

    def flush() -> None:
        if not buffer:
            return
        name = f"part-{len(files):05d}.parquet"
        frame = pl.DataFrame({c: [r[c] for r in buffer] for c in PAPER_COLUMNS}, schema=corpus_mod.SCHEMA)
        with atomic_path(folder / name) as tmp:
            frame.write_parquet(tmp)
        files.append(name)
        sizes.append(len(buffer))
        if progress is not None:
            progress(len(buffer))
        buffer.clear()

    ids: set[str] = set()
    if whole is not None:
        report = whole.report
        for row in whole.papers.iter_rows(named=True):
            buffer.append(row)
            ids.add(row["paper_id"])
            if len(buffer) >= shard_papers:
                flush()
        flush()
    else:
        assert items is not None
        reading = corpus_mod.Reading()
        with contextlib.closing(items):
            for rec in corpus_mod.valid_records(items, skip_bad=skip_bad, limit=limit, reading=reading):
                buffer.append(rec)
                if len(buffer) >= shard_papers:
                    flush()
        flush()
        ids = set(reading.first_seen)
        if not ids:
            raise InputValidationError(
                f"{source}: no papers loaded ({reading.n_read} records read, {len(reading.skipped)} skipped); "
                f"a corpus needs records with non-empty {', '.join(corpus_mod.REQUIRED_FIELDS)}")
        report = _resolve_references(folder, files, ids, source, reading.n_read, reading.skipped)
        if "openalex" in details:
            corpus_mod.add_openalex_counts(report, str(path), details.pop("openalex"))
    (folder / "openalex-slice.jsonl").unlink(missing_ok=True)
    content = _content_hash(folder, files)
    meta = {"signature": signature, "files": files, "papers": sizes, "report": report.as_dict(),
            "content_hash": content, "details": details}
    write_json(folder / _DONE, meta)
    return Shards(folder, files, sizes, report, content, details)


def _resolve_references(folder: Path, files: list[str], ids: set[str], source: str, n_read: int,
                        skipped: list[BadRecord]) -> LoadReport:
    """Keep each paper's references to corpus papers, once, never itself (as `load_corpus`), shard by
    shard; the load report with the same counts."""
    counts = {"dropped": 0, "self": 0, "duplicate": 0, "kept": 0}
    loaded = 0
    for name in files:
        frame = pl.read_parquet(folder / name)
        out = [corpus_mod.keep_references(pid, refs, ids, counts)
               for pid, refs in zip(frame["paper_id"].to_list(), frame["references"].to_list())]
        loaded += frame.height
        frame = frame.with_columns(pl.Series("references", out, dtype=pl.List(pl.Utf8)))
        with atomic_path(folder / name) as tmp:
            frame.write_parquet(tmp)
    return LoadReport(source=source, n_read=n_read, n_loaded=loaded, skipped=skipped,
                      dropped_references=counts["dropped"], resolved_references=counts["kept"],
                      self_references=counts["self"], duplicate_references=counts["duplicate"])


def _content_hash(folder: Path, files: list[str]) -> str:
    """`Corpus.content_hash` of the shards' rows: each shard's canonical rows sorted by id into a
    file, the files merged in id order into the digest (memory: one shard)."""
    runs = []
    for name in files:
        lines = sorted(corpus_mod.canonical_rows(pl.read_parquet(folder / name)))
        run = folder / f"{name}.hashrows"
        run.write_text("".join(json.dumps([pid, text], ensure_ascii=False) + "\n" for pid, text in lines),
                       encoding="utf-8")
        runs.append(run)
    digest = hashlib.sha256(corpus_mod.HASH_VERSION)
    handles = [r.open(encoding="utf-8") for r in runs]
    try:
        for _, text in heapq.merge(*(map(json.loads, h) for h in handles)):
            digest.update(text.encode())
            digest.update(b"\n")
    finally:
        for h in handles:
            h.close()
        for r in runs:
            with contextlib.suppress(OSError):
                os.unlink(r)
    return digest.hexdigest()
