"""A corpus streamed into Parquet shards (the distributed build's input) is the corpus `load_corpus`
reads: same rows in the same order, same references kept, same load counts, same content hash."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from conftest import REPO, cs768_path

from graft.errors import InputValidationError
from graphbuild.corpus import load_corpus
from graphbuild.shards import read_shards, write_shards

OPENALEX = REPO / "tests" / "data" / "openalex"


def cs768_records(n: int) -> list[dict]:
    with gzip.open(cs768_path(), "rt") as fh:
        return [json.loads(next(fh)) for _ in range(n)]


def same_corpus(shards, corpus) -> None:
    got = shards.corpus()
    assert got.papers.equals(corpus.papers)
    assert shards.content_hash == corpus.content_hash()
    want = corpus.report.as_dict()
    have = got.report.as_dict()
    for key in ("n_read", "n_loaded", "dropped_references", "resolved_references", "self_references",
                "duplicate_references"):
        assert have[key] == want[key], key
    assert [b["reason"] for b in have["skipped"]] == [b["reason"] for b in want["skipped"]]


def test_jsonl_shards_are_the_loaded_corpus_with_bad_records_duplicates_and_outside_references(tmp_path) -> None:
    records = cs768_records(230)
    records[3]["references"] = [*records[3]["references"], records[3]["id"], records[10]["id"], records[10]["id"]]
    records.insert(50, {"id": "no-abstract", "title": "A title"})
    records.insert(120, dict(records[7]))  # a duplicate id
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(InputValidationError, match="line 51"):
        write_shards(path, tmp_path / "strict", shard_papers=64)
    seen: list[int] = []
    shards = write_shards(path, tmp_path / "shards", skip_bad=True, shard_papers=64, progress=seen.append)
    assert shards.papers == [64, 64, 64, 38] and sum(seen) == 230
    assert all(p.is_file() for p in shards.paths) and not list((tmp_path / "shards").glob("*.hashrows"))
    corpus = load_corpus(path, skip_bad=True)
    same_corpus(shards, corpus)
    assert shards.report.self_references == 1 and shards.report.duplicate_references >= 1
    # the same input and settings: the shards are reused, not written again
    before = {p: p.stat().st_mtime_ns for p in shards.paths}
    again = write_shards(path, tmp_path / "shards", skip_bad=True, shard_papers=64)
    assert {p: p.stat().st_mtime_ns for p in again.paths} == before
    # another shard size (or another input) writes them anew
    other = write_shards(path, tmp_path / "shards", skip_bad=True, shard_papers=100)
    assert other.papers == [100, 100, 30] and sorted(p.name for p in (tmp_path / "shards").glob("part-*")) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    assert read_shards(tmp_path / "shards").content_hash == corpus.content_hash()


def test_parquet_and_limit(tmp_path) -> None:
    records = cs768_records(150)
    path = tmp_path / "corpus.parquet"
    pl.DataFrame([{"id": r["id"], "title": r["title"], "abstract": r["abstract"], "year": r.get("year"),
                   "references": r["references"]} for r in records]).write_parquet(path)
    shards = write_shards(path, tmp_path / "shards", limit=120, shard_papers=50)
    assert shards.papers == [50, 50, 20]
    same_corpus(shards, load_corpus(path, limit=120))


def test_openalex_snapshot_and_aclsum_shards(tmp_path) -> None:
    root = tmp_path / "data"  # the fixture as a snapshot: its JSON lines gzipped
    for src in OPENALEX.rglob("*"):
        if src.is_file() and src.suffix in (".jsonl", ".csv"):
            dest = (root / src.relative_to(OPENALEX)).with_suffix(".gz" if src.suffix == ".jsonl" else ".csv.gz")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(gzip.compress(src.read_bytes()))
    spec = f"openalex:{root / 'works'}?year=2015-"
    shards = write_shards(spec, tmp_path / "oa", shard_papers=2)
    corpus = load_corpus(spec)
    same_corpus(shards, corpus)
    assert shards.report.details["openalex"] == corpus.report.details["openalex"]
    assert not (tmp_path / "oa" / "openalex-slice.jsonl").exists()
    acl = write_shards("aclsum", tmp_path / "acl", limit=30, shard_papers=16)
    assert acl.papers == [16, 14]
    same_corpus(acl, load_corpus("aclsum", limit=30))


def test_no_papers_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(json.dumps({"id": "x"}) + "\n")
    with pytest.raises(InputValidationError, match="no papers loaded"):
        write_shards(path, tmp_path / "shards", skip_bad=True)
