"""DocIDs (the papers' own facet text) and the per-facet token-id prefix tries over them.

A DocID is a facet item, normalised (`graft.text.normalize_text`) and cut to the first
`max_tokens` = 12 token ids of the base model's tokenizer. Items whose cut token sequences are
identical within a facet are one DocID that maps to several papers; decoding collapses them.

Artefacts in the index directory:

- `docids/docids.parquet`: facet, docid_id (dense per facet), docid (decoded text), token_ids,
  paper_ids, n_papers — one row per DocID;
- `docids/items.parquet`: paper_id, facet, item_idx, docid_id — which DocID each facet item became
  (null for an item whose normalised text is empty), used by the distillation code;
- `docids/{facet}.marisa`: the `DocidTrie` of that facet;
- `docids/meta.json`: tokenizer name, vocabulary size and fingerprint, max_tokens, counts.

The trie is separate from decoding: a `transformers` LogitsProcessor (written elsewhere) asks
`DocidTrie.allowed_next(prefix)` / `allowed_mask(prefixes, ...)` which tokens may come next.
"""

from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import marisa_trie
import numpy as np
import polars as pl

from graft.artefacts import check_docids
from graft.errors import ConfigError, IndexFormatError
from graft.facets import FACETS
from graft.manifest import read_manifest, record_stage
from graft.store import atomic_path, read_json, write_json, write_parquet
from graft.text import normalize_text

#: Tokens kept per DocID (GRAFT paper).
MAX_TOKENS = 12
#: Bumped when the layout of the docids/ artefacts changes.
DOCIDS_VERSION = 1

# ---- the trie ------------------------------------------------------------------------------
# Keys are token-id sequences written one Unicode code point per token (id + 1, shifted past the
# surrogate block), so a key's length in code points is the prefix length and marisa's UTF-8
# bytes never contain 0xff, the separator BytesTrie puts between key and value.
_SURROGATES = 0xD800
_SHIFT = 0x800
_MAX_TOKEN_ID = 0x10FFFF - _SHIFT - 1


def _key(seq: Sequence[int]) -> str:
    try:
        if min(seq, default=0) < 0:
            raise ConfigError("negative token id")
        return "".join([chr(t + 1) if t < _SURROGATES - 1 else chr(t + 1 + _SHIFT) for t in seq])
    except (ValueError, OverflowError, TypeError) as exc:
        raise ConfigError(f"token ids must be ints in [0, {_MAX_TOKEN_ID}], got {list(seq)}") from exc


def _unkey(key: str) -> list[int]:
    out = []
    for ch in key:
        code = ord(ch)
        if code >= _SURROGATES + _SHIFT:
            code -= _SHIFT
        out.append(code - 1)
    return out


class DocidTrie:
    """Prefix trie over one facet's DocID token-id sequences (marisa-trie).

    Every prefix of every DocID (the empty one included) is a key; its value is an int32 array
    `[docid_id or -1, number of DocIDs below, child token ids...]`. So `allowed_next` is one
    lookup plus reading the children — O(prefix length + children), never a walk of the subtree.
    """

    def __init__(self, trie: marisa_trie.BytesTrie) -> None:
        self._trie = trie

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]], docid_ids: Sequence[int] | None = None) -> DocidTrie:
        """Build a trie.

        Args:
            sequences: the DocIDs' token-id sequences (non-empty, unique).
            docid_ids: the id `lookup` returns for each sequence; default its position.
        Raises:
            ValueError: an empty or duplicate sequence, or a token id out of range.
        """
        ids = list(range(len(sequences))) if docid_ids is None else [int(i) for i in docid_ids]
        if len(ids) != len(sequences):
            raise ConfigError(f"{len(sequences)} sequences but {len(ids)} docid_ids")
        # Keyed by the encoded string: a prefix of a sequence is a slice of its key.
        complete: dict[str, int] = {}
        children: dict[str, set[int]] = {"": set()}
        below: dict[str, int] = {"": 0}
        for seq, did in zip(sequences, ids):
            seq = [int(t) for t in seq]
            if not seq:
                raise ConfigError(f"DocID {did} has no tokens; empty DocIDs cannot be decoded")
            key = _key(seq)
            if key in complete:
                raise ConfigError(f"DocIDs {complete[key]} and {did} have the same tokens {seq}")
            complete[key] = did
            for k, tok in enumerate(seq):
                prefix = key[:k]
                below[prefix] = below.get(prefix, 0) + 1
                children.setdefault(prefix, set()).add(tok)
            below[key] = below.get(key, 0) + 1
            children.setdefault(key, set())
        entries = []
        for prefix, kids in children.items():
            value = [complete.get(prefix, -1), below[prefix], *sorted(kids)]
            entries.append((prefix, struct.pack(f"<{len(value)}i", *value)))
        return cls(marisa_trie.BytesTrie(entries))

    # ---- persistence ---------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the trie atomically (a killed run leaves the old file or the new one)."""
        with atomic_path(path, suffix=".marisa") as tmp:
            self._trie.save(str(tmp))

    @classmethod
    def load(cls, path: str | Path, *, mmap: bool = True) -> DocidTrie:
        """Open a saved trie; `mmap=True` maps the file instead of reading it (instant).

        Raises:
            IndexFormatError: the file is missing.
        """
        path = Path(path)
        if not path.is_file():
            raise IndexFormatError(f"DocID trie '{path}' is missing; rebuild DocIDs with `graft train INDEX`")
        trie = marisa_trie.BytesTrie()
        trie.mmap(str(path)) if mmap else trie.load(str(path))
        return cls(trie)

    # ---- queries -------------------------------------------------------------------------------
    def _node(self, prefix: Sequence[int]) -> np.ndarray | None:
        try:
            values = self._trie.get(_key(prefix))
        except ValueError:  # a token id no key can hold: no DocID has this prefix
            return None
        return None if not values else np.frombuffer(values[0], dtype="<i4")

    def allowed_next_array(self, prefix: Sequence[int]) -> np.ndarray:
        """Token ids that extend `prefix` toward some DocID (sorted int32; empty if none)."""
        node = self._node(prefix)
        return node[2:] if node is not None else np.empty(0, dtype="<i4")

    def allowed_next(self, prefix: Sequence[int], eos_id: int | None = None) -> list[int]:
        """Token ids that may follow `prefix`.

        Args:
            prefix: token ids generated so far (after the prompt).
            eos_id: if given and `prefix` is itself a complete DocID, this id (the end marker) is
                appended, so a decoder can stop there.
        Returns:
            sorted child token ids, then `eos_id` where it applies; empty when `prefix` is no
            DocID's prefix.
        """
        node = self._node(prefix)
        if node is None:
            return []
        out = node[2:].tolist()
        if eos_id is not None and node[0] >= 0:
            out.append(int(eos_id))
        return out

    def allowed_mask(self, prefixes: Sequence[Sequence[int]], vocab_size: int,
                     eos_id: int | None = None) -> np.ndarray:
        """Boolean mask `[len(prefixes), vocab_size]` of allowed next tokens, for a LogitsProcessor.

        A row whose prefix is no DocID's prefix is all False (the decoder decides what to do, e.g.
        force `eos_id` or drop the beam).
        """
        mask = np.zeros((len(prefixes), vocab_size), dtype=bool)
        for row, prefix in enumerate(prefixes):
            node = self._node(prefix)
            if node is None:
                continue
            mask[row, node[2:]] = True
            if eos_id is not None and node[0] >= 0:
                mask[row, eos_id] = True
        return mask

    def is_prefix(self, prefix: Sequence[int]) -> bool:
        """True when `prefix` begins (or is) some DocID; the empty prefix is one unless the trie is empty."""
        node = self._node(prefix)
        return node is not None and node[1] > 0

    def is_complete(self, prefix: Sequence[int]) -> bool:
        """True when `prefix` is itself a whole DocID (it may still extend to longer ones)."""
        return self.lookup(prefix) is not None

    def lookup(self, seq: Sequence[int]) -> int | None:
        """The docid_id of the DocID with exactly these tokens, or None."""
        node = self._node(seq)
        return int(node[0]) if node is not None and node[0] >= 0 else None

    def contains(self, seq: Sequence[int]) -> bool:
        """True when `seq` is exactly a DocID."""
        return self.lookup(seq) is not None

    __contains__ = contains

    def n_below(self, prefix: Sequence[int]) -> int:
        """How many DocIDs start with `prefix` (0 when none)."""
        node = self._node(prefix)
        return int(node[1]) if node is not None else 0

    def __len__(self) -> int:
        return self.n_below(())

    def __iter__(self) -> Iterator[tuple[list[int], int]]:
        """All (token ids, docid_id) pairs — walks the whole trie; for tests and export."""
        for key, value in self._trie.items():
            did = int(np.frombuffer(value, dtype="<i4")[0])
            if did >= 0:
                yield _unkey(key), did


# ---- the table -----------------------------------------------------------------------------
def _encode_all(tokenizer: Any, texts: list[str], keep: int) -> list[list[int]]:
    """The first `keep` token ids of each text, without special tokens; batched where possible."""
    if not texts:
        return []
    if callable(tokenizer):
        try:  # a Hugging Face tokenizer encodes a list in one (Rust) call; cutting there is the same
            ids = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=keep)["input_ids"]
            return [list(x) for x in ids]
        except (TypeError, KeyError):
            pass
    return [list(tokenizer.encode(t, add_special_tokens=False))[:keep] for t in texts]


def tokenizer_info(tokenizer: Any) -> dict[str, Any]:
    """Name, vocabulary size and a fingerprint of the vocabulary (to detect a different tokenizer)."""
    name = getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
    try:
        vocab_size = len(tokenizer)
    except TypeError:
        vocab_size = getattr(tokenizer, "vocab_size", None)
    fingerprint = None
    if hasattr(tokenizer, "get_vocab"):
        items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        fingerprint = hashlib.sha256("\n".join(f"{t}\t{i}" for t, i in items).encode()).hexdigest()[:16]
    return {"name": str(name), "vocab_size": vocab_size, "fingerprint": fingerprint}


_DOCID_SCHEMA = {"facet": pl.Utf8, "docid_id": pl.Int32, "docid": pl.Utf8, "token_ids": pl.List(pl.Int32),
                 "paper_ids": pl.List(pl.Utf8), "n_papers": pl.Int32}
_ITEM_SCHEMA = {"paper_id": pl.Utf8, "facet": pl.Utf8, "item_idx": pl.Int32, "docid_id": pl.Int32}


@dataclass
class DocidTable:
    """Every DocID of an index, per facet, with its papers, and the item -> DocID map.

    Attributes:
        docids: one row per DocID (schema of `docids/docids.parquet`).
        items: one row per facet item: paper_id, facet, item_idx, docid_id (null when empty).
        meta: tokenizer info, max_tokens and counts (`docids/meta.json`).
    """

    docids: pl.DataFrame
    items: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, facets: pl.DataFrame, tokenizer: Any, *, max_tokens: int = MAX_TOKENS) -> DocidTable:
        """Make the DocIDs of a facets table (`paper_id, facet, item_idx, text[, docid]`).

        Args:
            facets: the index's facets table; `docid` (normalised text) is recomputed when absent.
            tokenizer: any object with `encode(text, add_special_tokens=False)` and `decode(ids)`
                (a Hugging Face tokenizer); the base model's, since the trie holds its token ids.
            max_tokens: tokens kept per DocID.
        Returns:
            the table; docid_id is dense per facet, in order of first occurrence.
        Raises:
            ValueError: max_tokens < 1.
        """
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        if "docid" in facets.columns:
            norm = facets["docid"].to_list()
        else:
            norm = [normalize_text(t) for t in facets["text"].to_list()]
        # One token past the cut tells which items were truncated.
        full = _encode_all(tokenizer, norm, max_tokens + 1)
        seqs = [tuple(ids[:max_tokens]) for ids in full]
        fac = facets["facet"].to_list()
        pids = facets["paper_id"].to_list()

        # One DocID per distinct (facet, token sequence); papers listed in first-occurrence order.
        row_of: dict[tuple[str, tuple[int, ...]], int] = {}
        rows: dict[str, list[Any]] = {"facet": [], "docid_id": [], "token_ids": [], "paper_ids": []}
        next_id: dict[str, int] = {}
        item_docid: list[int | None] = []
        for f, pid, seq in zip(fac, pids, seqs):
            if not seq:  # an item of punctuation only: nothing to decode
                item_docid.append(None)
                continue
            r = row_of.get((f, seq))
            if r is None:
                r = row_of[(f, seq)] = len(rows["facet"])
                rows["facet"].append(f)
                rows["docid_id"].append(next_id.get(f, 0))
                rows["token_ids"].append(list(seq))
                rows["paper_ids"].append([])
                next_id[f] = next_id.get(f, 0) + 1
            papers = rows["paper_ids"][r]
            if not papers or papers[-1] != pid:  # a paper's items are contiguous in the table
                if pid not in papers:
                    papers.append(pid)
            item_docid.append(rows["docid_id"][r])
        texts = _decode_all(tokenizer, rows["token_ids"])
        docids = pl.DataFrame(
            {"facet": rows["facet"], "docid_id": rows["docid_id"], "docid": texts, "token_ids": rows["token_ids"],
             "paper_ids": rows["paper_ids"], "n_papers": [len(p) for p in rows["paper_ids"]]},
            schema=_DOCID_SCHEMA,
        )
        items = pl.DataFrame({"paper_id": pids, "facet": fac, "item_idx": facets["item_idx"].to_list(),
                              "docid_id": item_docid}, schema=_ITEM_SCHEMA)
        n_trunc: dict[str, int] = {}
        n_empty: dict[str, int] = {}
        for f, ids in zip(fac, full):
            n_trunc[f] = n_trunc.get(f, 0) + (len(ids) > max_tokens)
            n_empty[f] = n_empty.get(f, 0) + (len(ids) == 0)
        table = cls(docids, items)
        table.meta = {"docids_version": DOCIDS_VERSION, "tokenizer": tokenizer_info(tokenizer),
                      "max_tokens": max_tokens,
                      "counts": table._counts(truncated_items=n_trunc, empty_items=n_empty)}
        return table

    def _counts(self, **per_facet_extra: dict[str, int]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self.facet_names:
            d = self.docids.filter(pl.col("facet") == f)
            out[f] = {
                "items": int((self.items["facet"] == f).sum()),
                "docids": d.height,
                "shared_docids": int((d["n_papers"] > 1).sum()),
                "papers_in_shared": int(d.filter(pl.col("n_papers") > 1)["n_papers"].sum() or 0),
                **{k: int(v.get(f, 0)) for k, v in per_facet_extra.items()},
            }
        return out

    # ---- access --------------------------------------------------------------------------------
    @property
    def facet_names(self) -> list[str]:
        """Facets present, in `FACETS` order first."""
        present = set(self.items["facet"].unique().to_list()) | set(self.docids["facet"].unique().to_list())
        return [f for f in FACETS if f in present] + sorted(present - set(FACETS))

    def __len__(self) -> int:
        return self.docids.height

    def facet(self, facet: str) -> pl.DataFrame:
        """The DocIDs of one facet, sorted by docid_id."""
        return self.docids.filter(pl.col("facet") == facet).sort("docid_id")

    def shared_counts(self) -> dict[str, int]:
        """Per facet: how many DocIDs map to more than one paper."""
        return {f: int((self.facet(f)["n_papers"] > 1).sum()) for f in self.facet_names}

    @cached_property
    def _item_map(self) -> dict[tuple[str, str, int], int | None]:
        return {(p, f, int(k)): d for p, f, k, d in self.items.iter_rows()}

    def item_docid(self, paper_id: str, facet: str, item_idx: int) -> int | None:
        """docid_id of a facet item (None when its normalised text was empty).

        Raises:
            KeyError: no such item in the index.
        """
        return self._item_map[(paper_id, facet, int(item_idx))]

    def papers_of(self, facet: str, docid_id: int) -> list[str]:
        """The papers a DocID maps to."""
        return self.facet(facet)["paper_ids"][int(docid_id)].to_list()

    def trie(self, facet: str) -> DocidTrie:
        """Build the facet's trie from the table (in memory)."""
        d = self.facet(facet)
        return DocidTrie.build(d["token_ids"].to_list(), d["docid_id"].to_list())

    # ---- persistence ---------------------------------------------------------------------------
    def save(self, directory: str | Path, *, tries: bool = True) -> None:
        """Write docids.parquet, items.parquet, meta.json and (optionally) one trie per facet."""
        directory = Path(directory)
        write_parquet(directory / "docids.parquet", self.docids)
        write_parquet(directory / "items.parquet", self.items)
        if tries:
            for f in self.facet_names:
                self.trie(f).save(directory / f"{f}.marisa")
        write_json(directory / "meta.json", self.meta)  # written last: marks a finished set

    @classmethod
    def load(cls, directory: str | Path) -> DocidTable:
        """Read a saved table.

        Raises:
            IndexFormatError: files missing or written by an incompatible version.
        """
        directory = Path(directory)
        if not (directory / "meta.json").is_file():
            raise IndexFormatError(f"no DocIDs in '{directory}'; build them with `graft train INDEX` "
                                   f"(or `graft train INDEX --dry-run`)")
        meta = read_json(directory / "meta.json")
        if meta.get("docids_version") != DOCIDS_VERSION:
            raise IndexFormatError(f"{directory}: DocIDs version {meta.get('docids_version')} is not "
                                   f"{DOCIDS_VERSION}; rebuild them with `graft train INDEX`")
        tables = []
        for name in ("docids.parquet", "items.parquet"):
            try:
                tables.append(pl.read_parquet(directory / name))
            except Exception as exc:  # polars raises several unrelated types for a damaged file
                raise IndexFormatError(f"{directory / name} cannot be read ({type(exc).__name__}: {exc}); rebuild "
                                       "the DocIDs with `graft train INDEX`") from exc
        return cls(tables[0], tables[1], meta)


def _decode_all(tokenizer: Any, seqs: list[list[int]]) -> list[str]:
    if hasattr(tokenizer, "batch_decode"):
        return [s.strip() for s in tokenizer.batch_decode(seqs)]
    return [tokenizer.decode(s).strip() for s in seqs]


# ---- index-level entry points ----------------------------------------------------------------
def docids_dir(index_dir: str | Path) -> Path:
    return Path(index_dir) / "docids"


def build_docids(index_dir: str | Path, tokenizer: Any, *, max_tokens: int = MAX_TOKENS) -> DocidTable:
    """Make an index's DocIDs and tries, write them atomically and record a `docids` stage.

    Args:
        index_dir: a built index.
        tokenizer: the base model's tokenizer (see `DocidTable.build`).
        max_tokens: tokens kept per DocID.
    Returns:
        the table (its `meta["counts"]` holds per-facet DocID and shared-DocID counts).
    Raises:
        IndexFormatError: the directory is not a built index.
    """
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir, require=("build",))
    start = time.perf_counter()
    facets = pl.read_parquet(index_dir / "facets.parquet")
    table = DocidTable.build(facets, tokenizer, max_tokens=max_tokens)
    table.meta["corpus_hash"] = manifest.get("corpus_hash")
    t_build = time.perf_counter() - start
    table.save(docids_dir(index_dir))
    t_write = time.perf_counter() - start - t_build
    record_stage(index_dir, manifest, "docids",
                 config={"max_tokens": max_tokens, "tokenizer": table.meta["tokenizer"]},
                 counts=table.meta["counts"], timings={"build": t_build, "write": t_write})
    return table


def load_docids(index_dir: str | Path, tokenizer: Any = None) -> DocidTable:
    """Read an index's DocIDs.

    Args:
        index_dir: the index directory.
        tokenizer: if given, the DocIDs must have been made with this tokenizer.
    Raises:
        IndexFormatError: no DocIDs yet, DocIDs of an older build of the graph, or of another
            tokenizer; the message says which command rebuilds them.
    """
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir, require=("build",))
    table = DocidTable.load(docids_dir(index_dir))
    if table.meta.get("corpus_hash") != manifest.get("corpus_hash"):
        raise IndexFormatError(f"DocIDs in '{index_dir}' belong to another build of the corpus; "
                               f"rebuild them with `graft train {index_dir}`")
    try:
        papers = pl.read_parquet(index_dir / "papers.parquet", columns=["paper_id"])["paper_id"]
    except Exception as exc:  # polars raises several unrelated types for a damaged file
        raise IndexFormatError(f"index '{index_dir}': papers.parquet cannot be read ({type(exc).__name__}: {exc}); "
                               f"rebuild the index with `graft build CORPUS --out {index_dir}`") from exc
    check_docids(table.docids, table.items, papers, index_dir, docids_dir(index_dir).relative_to(index_dir).as_posix())
    if tokenizer is not None:
        check_tokenizer(index_dir, table.meta, tokenizer)
    return table


def check_tokenizer(index_dir: str | Path, meta: dict[str, Any], tokenizer: Any) -> None:
    """Refuse a tokenizer other than the one an index's DocIDs were made with (`meta` = the
    DocIDs' meta.json).

    Raises:
        IndexFormatError: another vocabulary; the message says which command rebuilds the DocIDs.
    """
    want, have = tokenizer_info(tokenizer), meta.get("tokenizer", {})
    if (want["fingerprint"], want["vocab_size"]) != (have.get("fingerprint"), have.get("vocab_size")):
        raise IndexFormatError(f"DocIDs in '{index_dir}' were made with tokenizer {have.get('name')!r}, "
                               f"not {want['name']!r}; rebuild them with `graft train {index_dir}`")


def load_or_build_docids(index_dir: str | Path, tokenizer: Any, *, max_tokens: int = MAX_TOKENS,
                         write: bool = True) -> DocidTable:
    """The index's DocIDs for this tokenizer: the saved ones when they match, else new ones.

    Args:
        index_dir: a built index.
        tokenizer: the base model's tokenizer.
        max_tokens: tokens kept per DocID.
        write: save newly made DocIDs into the index (False: keep them in memory, for dry runs).
    Raises:
        IndexFormatError: the directory is not a built index.
    """
    try:
        table = load_docids(index_dir, tokenizer)
        if table.meta.get("max_tokens") == max_tokens:
            return table
    except IndexFormatError:
        read_manifest(index_dir, require=("build",))  # a missing index is still an error
    if write:
        return build_docids(index_dir, tokenizer, max_tokens=max_tokens)
    return DocidTable.build(pl.read_parquet(Path(index_dir) / "facets.parquet"), tokenizer, max_tokens=max_tokens)


def load_tries(index_dir: str | Path, *, mmap: bool = True) -> dict[str, DocidTrie]:
    """The per-facet tries of an index, memory-mapped (fast: no parsing).

    Raises:
        IndexFormatError: no DocIDs yet.
    """
    directory = docids_dir(index_dir)
    meta_path = directory / "meta.json"
    if not meta_path.is_file():
        raise IndexFormatError(f"no DocIDs in '{index_dir}'; build them with `graft train {index_dir}`")
    facets = list(read_json(meta_path).get("counts", {}))
    return {f: DocidTrie.load(directory / f"{f}.marisa", mmap=mmap) for f in facets}
