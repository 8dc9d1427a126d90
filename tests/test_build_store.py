"""The content-keyed stores of `graft build` (graphbuild.checkpoints): shards, settings, rewrites."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

import graphbuild.checkpoints as ck
from graphbuild.checkpoints import RowStore, StoredEncoder, paper_digests, text_digest


class HashEncoder:
    """A deterministic stand-in encoder: a text's vector is drawn from its digest; counts texts."""

    dim = 8

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts, progress=None):
        self.calls.append(list(texts))
        out = np.stack([np.random.default_rng(int(text_digest(t)[:8], 16)).standard_normal(self.dim)
                        for t in texts]).astype(np.float32) if texts else np.zeros((0, self.dim), np.float32)
        if progress is not None:
            progress(len(texts))
        return out


class Origin:
    def __init__(self, backend: str = "onnx") -> None:
        self.backend, self.seen = backend, set()

    def made(self):
        self.seen.add(self.backend)
        return {"backend": self.backend}

    def reused(self, meta):
        self.seen.add(meta["backend"])


def rows(keys: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"key": keys, "text": [f"text of {k}" for k in keys]})


def test_rows_are_read_back_by_key_first_shard_first(tmp_path) -> None:
    store = RowStore(tmp_path / "s", "setting-a")
    store.add(rows(["a", "b"]), np.eye(2, 3, dtype=np.float32), {"backend": "onnx"})
    store.add(rows(["c", "a"]), np.full((2, 3), 7, np.float32), {"backend": "torch"})  # "a" again
    got = store.load()
    assert got.table["key"].to_list() == ["a", "b", "c"]  # the second shard's "a" is not read
    assert got.positions(["c", "zz", "a"]) == [[2], [], [0]]
    np.testing.assert_array_equal(got.vectors, [[1, 0, 0], [0, 1, 0], [7, 7, 7]])
    assert got.metas_of([0, 2]) == [{"backend": "onnx"}, {"backend": "torch"}]
    with pytest.raises(ValueError, match="2 rows but 1 vectors"):
        store.add(rows(["d", "e"]), np.zeros((1, 3), np.float32))


def test_other_settings_and_unfinished_shards_are_never_read(tmp_path) -> None:
    folder = tmp_path / "s"
    RowStore(folder, "old").add(rows(["a"]), np.ones((1, 3), np.float32))
    store = RowStore(folder, "new")
    assert store.load().table.height == 0  # another setting's rows
    (folder / "000007.parquet").write_bytes(b"cut short")  # a shard killed before its JSON
    store.add(rows(["b"]), np.ones((1, 3), np.float32))  # the old setting's shard and the stray file go
    assert sorted(p.name for p in folder.iterdir()) == ["000000.json", "000000.parquet", "000000.vectors.npy"]
    assert store.load().table["key"].to_list() == ["b"]
    RowStore(folder, "new", reuse=False)  # --fresh: empties the store
    assert not list(folder.glob("*.json"))


def test_a_store_is_rewritten_to_its_live_rows(tmp_path, monkeypatch) -> None:
    store = RowStore(tmp_path / "s", "k")
    store.add(rows(["a", "b", "c", "x"]), np.arange(12, dtype=np.float32).reshape(4, 3), {"backend": "onnx"})
    store.add(rows(["d"]), np.full((1, 3), 9, np.float32), {"backend": "torch"})
    assert not store.compact(["a", "b", "d"])  # 2 dead rows, 3 live: kept as it is
    assert store.compact(["a", "d"])  # 3 dead, 2 live
    got = store.load()
    assert got.table["key"].to_list() == ["a", "d"] and got.metas == [{"backend": "onnx"}, {"backend": "torch"}]
    np.testing.assert_array_equal(got.vectors, [[0, 1, 2], [9, 9, 9]])
    monkeypatch.setattr(ck, "MAX_SHARDS", 3)
    for k in "efg":
        store.add(rows([k]), np.zeros((1, 3), np.float32), {"backend": "onnx"})
    assert len(store._shards()) == 5
    assert store.compact(list("adefg"))  # too many shards: one per maker's metadata
    assert len(store._shards()) == 2 and sorted(store.load().table["key"].to_list()) == list("adefg")


def test_the_stored_encoder_makes_each_missing_text_once(tmp_path) -> None:
    inner, origin, done = HashEncoder(), Origin(), []
    first = StoredEncoder(inner, RowStore(tmp_path / "t", "k"), origin, chunk=2)
    texts = ["x", "y", "x", "z", ""]
    vecs = first.encode(texts, progress=done.append)
    assert inner.calls == [["x", "y"], ["z", ""]] and sum(done) == len(texts)  # chunks of 2 distinct texts
    np.testing.assert_array_equal(vecs, HashEncoder().encode(texts))
    assert (first.found, first.total) == (0, 5) and len(list((tmp_path / "t").glob("*.json"))) == 2

    inner.calls.clear()
    later = StoredEncoder(inner, RowStore(tmp_path / "t", "k"), Origin("torch"), chunk=2)
    again = later.encode(["z", "w", "x"])
    assert inner.calls == [["w"]] and (later.found, later.total) == (2, 3)
    np.testing.assert_array_equal(again, HashEncoder().encode(["z", "w", "x"]))
    assert later.origin.seen == {"onnx", "torch"}  # read from onnx shards, one made now on torch
    assert later.compact() is False  # "y" and "" dead, 3 live
    assert StoredEncoder(inner, RowStore(tmp_path / "t", "k"), origin).encode(["q"]).shape == (1, 8)


def test_paper_digests_follow_what_an_extractor_reads() -> None:
    papers = pl.DataFrame({"paper_id": ["p1", "p2", "p3"], "title": ["T", "T", "T"], "abstract": ["A", "A", "B"],
                           "year": [2001, 2002, 2003]})
    d = paper_digests(papers)
    assert d[0] == d[1] != d[2]  # the id and the year are not read by an extractor
    with_text = papers.with_columns(pl.Series("full_text", ["F", None, None]))
    d2 = paper_digests(with_text)
    assert d2[0] != d2[1] and json.dumps(d2)  # the full text is


def _files(folder):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_seeding_copies_the_wanted_rows_of_the_same_setting_only(tmp_path) -> None:
    """`graft build --cache-from`: another store's rows of the keys asked for, which this store
    lacks, are copied (several rows per key, one shard per maker); the other store is only read."""
    other = RowStore(tmp_path / "other", "k")
    other.add(pl.DataFrame({"key": ["a", "a", "b", "c"], "text": ["a1", "a2", "b1", "c1"]}),
              np.arange(12, dtype=np.float32).reshape(4, 3), {"backend": "onnx"})
    other.add(rows(["d"]), np.full((1, 3), 5, np.float32), {"backend": "torch"})
    before = _files(tmp_path / "other")
    mine = RowStore(tmp_path / "mine", "k")
    mine.add(rows(["b"]), np.full((1, 3), -1, np.float32), {"backend": "onnx"})
    assert mine.seed(other, ["a", "b", "d", "zz"]) == 2  # "b" is held already, "zz" by neither
    got = mine.load()
    assert got.table["key"].to_list() == ["b", "a", "a", "d"]
    assert got.table["text"].to_list() == ["text of b", "a1", "a2", "text of d"]
    np.testing.assert_array_equal(got.vectors, [[-1, -1, -1], [0, 1, 2], [3, 4, 5], [5, 5, 5]])
    assert got.metas == [{"backend": "onnx"}, {"backend": "onnx"}, {"backend": "torch"}]
    assert mine.seed(other, ["a", "b", "d"]) == 0  # all held now: nothing more is written
    assert len(mine._shards()) == 3
    assert _files(tmp_path / "other") == before
    assert RowStore(tmp_path / "fresh", "other-setting").seed(other, ["a"]) == 0  # another setting's rows
    assert RowStore(tmp_path / "fresh", "k").seed(RowStore(tmp_path / "nothing", "k"), ["a"]) == 0


def test_the_stored_encoder_copies_seeded_vectors_before_encoding(tmp_path) -> None:
    inner = HashEncoder()
    StoredEncoder(inner, RowStore(tmp_path / "other", "k"), Origin("torch")).encode(["x", "y"])
    inner.calls.clear()
    seeded = StoredEncoder(inner, RowStore(tmp_path / "mine", "k"), Origin(), seed=RowStore(tmp_path / "other", "k"))
    vecs = seeded.encode(["y", "z", "y"])
    assert inner.calls == [["z"]] and seeded.seeded == 1 and (seeded.found, seeded.total) == (2, 3)
    assert seeded.origin.seen == {"torch", "onnx"}  # y made on torch by the other index, z here
    np.testing.assert_array_equal(vecs, HashEncoder().encode(["y", "z", "y"]))
    assert sorted(RowStore(tmp_path / "mine", "k").load().table["key"].to_list()) == sorted(
        [text_digest("y"), text_digest("z")])
