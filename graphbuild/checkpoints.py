"""What `graft build` keeps of its encoder work, in INDEX/cache/build, keyed by content.

The facets (with the items' own vectors) and the other encoder passes (titles; title + abstract of
each paper) are nearly all of a build's time on a CPU. Their outputs are kept per paper and per
text, not per corpus: a row's key is the digest of what it was made from (a paper's title,
abstract and full text; an encoded text), and each store holds the rows of one setting (extractor
and its code, embedding model, batch size and device). A build looks every paper up and computes
only what is missing, so

- a rerun after a crash, Ctrl-C or a full disk loses at most one shard of work;
- a rebuild with other graph settings (top-K, alpha/beta, title weight, citation rescaling) makes no
  vectors at all;
- a corpus that grew, shrank, was reordered or had papers edited costs only the new and edited
  papers' extraction and encoding (plus the graph, which is always rebuilt).

Vectors are kept as float32, so a resumed or incremental build equals one from scratch (bit for bit
on ONNX Runtime, whose vectors do not depend on the batch they were made in; within float32
rounding on PyTorch). The folder can be deleted at any time; `graft build --fresh` empties it first.

A store is a folder of append-only shards `NNNNNN.parquet` (the rows, with a `key` column) +
`NNNNNN.vectors.npy` (one float32 vector per row) + `NNNNNN.json` (the setting's key, the shapes and
the maker's metadata), the JSON written last, so a shard cut short is never read. A store whose dead
rows (papers no longer in the corpus) outnumber its live ones, or with too many shards, is rewritten
to its live rows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from graft.errors import ConfigError
from graft.store import read_json, write_json, write_npy, write_parquet

#: Bumped when what a store holds changes, so older shards never match.
CHECKPOINT_FORMAT = 2

#: A store is rewritten to its live rows once it has more shards than this.
MAX_SHARDS = 64

_REPO_PACKAGES = Path(__file__).resolve().parents[1]


def source_digest(*modules: str) -> str:
    """sha256 of the named source files (paths relative to the repository root, e.g.
    "graft/extract.py"): rows made by other code do not match."""
    digest = hashlib.sha256()
    for rel in modules:
        digest.update(rel.encode() + b"\0" + (_REPO_PACKAGES / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def make_key(**parts: Any) -> str:
    """A stable hex key of JSON-serialisable parts (order of the keyword arguments is irrelevant)."""
    blob = json.dumps({"format": CHECKPOINT_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def text_digest(text: str) -> str:
    """The key of an encoded text: 32 hex digits of its sha256."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def paper_digests(papers: pl.DataFrame) -> list[str]:
    """The key of each corpus row's facets: a digest of what an extractor reads (title, abstract,
    full text), so an edited paper is taken apart again and an unchanged one, wherever it sits in
    the corpus and whatever its id, is not."""
    cols = [c for c in ("title", "abstract", "full_text") if c in papers.columns]
    return [text_digest(json.dumps(list(row), ensure_ascii=False)) for row in papers.select(cols).iter_rows()]


@dataclass
class StoredRows:
    """The rows of a store that match its setting, each key once (the first shard's), with their
    vectors and the metadata of the shard each row came from."""

    table: pl.DataFrame  # the shards' columns, "key" first, plus "shard" (index into `metas`)
    vectors: np.ndarray  # (rows, d) float32, aligned with `table`
    metas: list[dict[str, Any]] = field(default_factory=list)

    def positions(self, keys: Sequence[str]) -> list[list[int]]:
        """The stored rows of each key, in stored order ([] for a key not held)."""
        rows: dict[str, list[int]] = {}
        for i, k in enumerate(self.table["key"].to_list()):
            rows.setdefault(k, []).append(i)
        return [rows.get(k, []) for k in keys]

    def metas_of(self, rows: Iterable[int]) -> list[dict[str, Any]]:
        """The metadata of the shards the given rows came from, each once."""
        shard = self.table["shard"].to_numpy()
        return [self.metas[s] for s in sorted({int(shard[r]) for r in rows})]


class RowStore:
    """Rows keyed by content digest, each with a vector, of one setting, in append-only shards.

    Args:
        folder: the store's folder (INDEX/cache/build/STAGE).
        key: the setting's key (`make_key`); shards made under another key are never read and are
            deleted when this store is first written.
        reuse: False ignores (and empties) what the folder holds: `graft build --fresh`.
    """

    def __init__(self, folder: str | Path, key: str, *, reuse: bool = True) -> None:
        self.folder = Path(folder)
        self.key = key
        self._written = False
        if not reuse:
            self._remove(self._shards())

    def _shards(self) -> list[str]:
        """Names of the finished shards, oldest first."""
        if not self.folder.is_dir():
            return []
        return sorted(p.stem for p in self.folder.glob("[0-9]" * 6 + ".json"))

    def _remove(self, names: Iterable[str]) -> None:
        for name in names:
            (self.folder / f"{name}.json").unlink(missing_ok=True)  # first: the shard is no longer finished
            for data in self.folder.glob(f"{name}.*"):
                data.unlink(missing_ok=True)

    def _tidy(self) -> None:
        """Delete what can never be read again: another setting's shards, and the files of a shard
        cut short before its JSON."""
        keep = {n for n in self._shards() if self._key_of(n) == self.key}
        if self.folder.is_dir():
            for path in self.folder.iterdir():
                if path.is_file() and path.name.split(".")[0] not in keep:
                    path.unlink(missing_ok=True)

    def _key_of(self, name: str) -> str | None:
        try:
            return read_json(self.folder / f"{name}.json").get("key")
        except (OSError, ValueError, AttributeError):
            return None

    def load(self) -> StoredRows:
        """Every finished shard of this setting; damaged or replaced shards are skipped (their rows
        are made again)."""
        tables, vectors, metas = [], [], []
        for name in self._shards():
            try:
                saved = read_json(self.folder / f"{name}.json")
                if saved.get("key") != self.key:
                    continue
                vecs = np.load(self.folder / f"{name}.vectors.npy")
                table = pl.read_parquet(self.folder / f"{name}.parquet")
            except (OSError, ValueError, KeyError, pl.exceptions.PolarsError):  # damaged files: made again
                continue
            if [list(vecs.shape), str(vecs.dtype)] != saved.get("vectors") or table.height != vecs.shape[0]:
                continue  # replaced by other data since
            if not np.isfinite(vecs).all():
                continue  # damaged (NaN or inf): made again, never carried into the index
            tables.append(table.with_columns(pl.lit(len(metas), dtype=pl.Int32).alias("shard")))
            vectors.append(vecs)
            metas.append(saved.get("meta", {}))
        if not tables:
            return StoredRows(pl.DataFrame({"key": [], "shard": []}, schema={"key": pl.Utf8, "shard": pl.Int32}),
                              np.zeros((0, 0), np.float32))
        table = pl.concat(tables, how="diagonal_relaxed")
        vecs = np.concatenate(vectors).astype(np.float32, copy=False)
        # a key twice (a rewrite cut short before the old shards went): the first shard's rows
        first = table.with_row_index("_row").group_by("key").agg(pl.col("shard").min().alias("_first"))
        keep = table.with_row_index("_row").join(first, on="key").filter(pl.col("shard") == pl.col("_first"))
        keep = keep.sort("_row")
        if keep.height != table.height:
            rows = keep["_row"].to_numpy()
            return StoredRows(table[rows], vecs[rows], metas)
        return StoredRows(table, vecs, metas)

    def add(self, table: pl.DataFrame, vectors: np.ndarray, meta: dict[str, Any] | None = None) -> None:
        """Append rows (`table` with a "key" column) and their vectors as one new shard."""
        if table.height != len(vectors):
            raise ConfigError(f"{table.height} rows but {len(vectors)} vectors")
        if not self._written:
            self._tidy()
            self._written = True
        names = self._shards()
        name = f"{int(names[-1]) + 1 if names else 0:06d}"
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        write_parquet(self.folder / f"{name}.parquet", table)
        write_npy(self.folder / f"{name}.vectors.npy", vectors)
        write_json(self.folder / f"{name}.json", {"key": self.key, "meta": meta or {},
                                                  "vectors": [list(vectors.shape), str(vectors.dtype)]})

    def compact(self, live: Iterable[str]) -> bool:
        """Rewrite the store to the rows of the `live` keys when dead rows outnumber live ones or
        it has more than MAX_SHARDS shards: new shards first, then the old ones go, so a rewrite cut
        short loses nothing. Returns whether it rewrote."""
        names = self._shards()
        if not names:
            return False
        stored = self.load()
        is_live = stored.table["key"].is_in(list(set(live))).to_numpy()
        if not ((~is_live).sum() > is_live.sum() or len(names) > MAX_SHARDS):
            return False
        self._add_rows(stored, np.flatnonzero(is_live))
        self._remove(names)
        return True

    def seed(self, other: RowStore, keys: Iterable[str]) -> int:
        """Copy from `other` (another index's store of the same stage) the rows of those `keys` that
        it holds under this store's setting and this store lacks: `graft build --cache-from`.
        `other` is only read. Returns how many keys were copied."""
        theirs = other.load() if other.key == self.key else None
        if theirs is None or not theirs.table.height:
            return 0
        wanted = set(keys).difference(self.load().table["key"].to_list())
        rows = np.flatnonzero(theirs.table["key"].is_in(list(wanted)).to_numpy())
        self._add_rows(theirs, rows)
        return int(theirs.table["key"][rows].n_unique()) if len(rows) else 0

    def _add_rows(self, stored: StoredRows, rows: np.ndarray) -> None:
        """Append the given rows of `stored` as one shard per distinct maker's metadata (the backend
        that made the vectors), so that it is kept."""
        if not len(rows):
            return
        made_by = [json.dumps(meta, sort_keys=True) for meta in stored.metas]
        group = np.array([made_by.index(made_by[s]) for s in stored.table["shard"].to_numpy()], dtype=np.int64)
        for g in sorted(set(group[rows].tolist())):
            part = rows[group[rows] == g]
            self.add(stored.table[part].drop("shard"), stored.vectors[part], stored.metas[g])


class StoredEncoder:
    """An encoder whose vectors are looked up in a `RowStore` keyed by text digest first; missing
    texts are encoded `chunk` at a time and each chunk is stored as it is done.

    Args:
        encoder: the encoder that makes missing vectors (`encode(texts, progress=...)`, `dim`).
        store: where the vectors are kept.
        origin: told what made the vectors: `made()` gives the metadata stored with new ones,
            `reused(meta)` takes that of each shard that served some (`graphbuild.build.VectorOrigin`).
        chunk: texts per stored shard (what a crash can lose).
        seed: another index's store of the same stage, whose vectors of the texts asked for are
            copied into `store` before anything is encoded (`RowStore.seed`).
    """

    def __init__(self, encoder: Any, store: RowStore, origin: Any, *, chunk: int = 4096,
                 seed: RowStore | None = None) -> None:
        self.encoder = encoder
        self.store = store
        self.seed = seed
        self.seeded = 0  # texts copied from `seed`, over all calls
        self.origin = origin
        self.chunk = chunk
        self.dim = int(encoder.dim)
        self.found = self.total = 0  # texts served from the store / asked for, over all calls
        self.asked: set[str] = set()  # the keys of every text asked for

    def encode(self, texts: list[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """float32 (len(texts), dim) unit rows, as `encoder.encode` would give them."""
        keys = [text_digest(t) for t in texts]
        self.asked.update(keys)
        if self.seed is not None:
            self.seeded += self.store.seed(self.seed, keys)
        stored = self.store.load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        served: list[int] = []
        for i, rows in enumerate(stored.positions(keys)):
            if rows:
                out[i] = stored.vectors[rows[0]]
                served.append(rows[0])
            else:
                missing.setdefault(texts[i], []).append(i)
        for meta in stored.metas_of(served):
            self.origin.reused(meta)
        self.total += len(texts)
        self.found += len(served)
        if progress is not None and served:
            progress(len(served))
        todo = list(missing)
        for start in range(0, len(todo), self.chunk):
            part = todo[start : start + self.chunk]
            vecs = np.asarray(self.encoder.encode(part, progress=progress), dtype=np.float32)
            self.store.add(pl.DataFrame({"key": [text_digest(t) for t in part]}, schema={"key": pl.Utf8}),
                           vecs, self.origin.made())
            for t, v in zip(part, vecs):
                out[missing[t]] = v
            extra = sum(len(missing[t]) for t in part) - len(part)  # repeated texts, encoded once
            if progress is not None and extra:
                progress(extra)
        return out

    def compact(self) -> bool:
        """`RowStore.compact` to the vectors of the texts asked for so far."""
        return self.store.compact(self.asked)
