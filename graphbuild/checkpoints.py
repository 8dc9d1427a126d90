"""Stage checkpoints of `graft build`, kept in INDEX/cache/build.

The facets (with the items' vectors) and the other encoder passes (titles; title + abstract of each
paper) are nearly all of a build's time on a CPU. Each is saved as soon as it is done, under a key
made of everything its output depends on: the corpus content and row order, the extractor and its code,
the embedding model and batch size. A rerun after a crash, Ctrl-C or a full disk, or a rebuild
with other graph settings (top-K, alpha/beta, title weight, citation rescaling), loads what matches
instead of recomputing it; anything else (another corpus, model or extractor version) misses its
key and is recomputed, and its checkpoint replaced. Vectors are kept as float32, so a resumed build
equals one run from scratch (bit for bit, unless two papers in different parts share a sentence
that only one of them uses as an item: the encoder's memo then serves it from another batch). The folder can be deleted at any time; `graft build --fresh`
ignores it.

A checkpoint is its data files plus `STAGE.json` (key, shapes, metadata), written last and removed
before its data is replaced, so a half-written checkpoint never matches. The facets stage is saved
in parts of `graphbuild.build.CHECKPOINT_PAPERS` papers ("facets.00000", ...), each with its
items' own vectors, so a build killed in that stage keeps the parts it finished.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from graft.store import read_json, write_json, write_npy, write_parquet

#: Bumped when what a checkpoint holds changes, so older ones never match.
CHECKPOINT_FORMAT = 1

_REPO_PACKAGES = Path(__file__).resolve().parents[1]


def source_digest(*modules: str) -> str:
    """sha256 of the named source files (paths relative to the repository root, e.g.
    "graphbuild/facets_heuristic.py"): a checkpoint made by other code does not match."""
    digest = hashlib.sha256()
    for rel in modules:
        digest.update(rel.encode() + b"\0" + (_REPO_PACKAGES / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def make_key(**parts: Any) -> str:
    """A stable hex key of JSON-serialisable parts (order of the keyword arguments is irrelevant)."""
    blob = json.dumps({"format": CHECKPOINT_FORMAT, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def order_digest(ids: list[str]) -> str:
    """sha256 of a list of ids in order (the corpus hash ignores row order; node order does not)."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


class StageCheckpoints:
    """Save and load one build's stage outputs by key.

    Args:
        folder: where the checkpoints live (INDEX/cache/build).
        reuse: False ignores existing checkpoints (they are still written, replacing the old ones).
    """

    def __init__(self, folder: str | Path, *, reuse: bool = True) -> None:
        self.folder = Path(folder)
        self.reuse = reuse
        self.reused: list[str] = []  # stages served from a checkpoint, in order

    def _meta_path(self, stage: str) -> Path:
        return self.folder / f"{stage}.json"

    def load(self, stage: str, key: str, *, record: bool = True) -> dict[str, Any] | None:
        """The stage's saved arrays, table and metadata if its checkpoint has this key, else None;
        `record` adds the stage to `reused` when found.

        Returns:
            {"meta": dict, "arrays": {name: ndarray}, "table": DataFrame | None}.
        """
        meta_path = self._meta_path(stage)
        if not self.reuse or not meta_path.is_file():
            return None
        try:
            saved = read_json(meta_path)
            if saved.get("key") != key or not isinstance(saved.get("arrays"), dict):
                return None
            arrays = {name: np.load(self.folder / f"{stage}.{name}.npy") for name in saved["arrays"]}
            table = pl.read_parquet(self.folder / f"{stage}.parquet") if saved.get("table") is not None else None
        except (OSError, ValueError, KeyError, pl.exceptions.PolarsError):  # damaged files: recompute
            return None
        shapes = {name: [list(a.shape), str(a.dtype)] for name, a in arrays.items()}
        if shapes != saved["arrays"] or (table is not None and table.height != saved.get("table")):
            return None  # replaced by other data since
        if record:
            self.reused.append(stage)
        return {"meta": saved.get("meta", {}), "arrays": arrays, "table": table}

    def save(self, stage: str, key: str, *, arrays: dict[str, np.ndarray] | None = None,
             table: pl.DataFrame | None = None, meta: dict[str, Any] | None = None) -> None:
        """Write the stage's outputs, then its key (so a checkpoint cut short never matches)."""
        meta_path = self._meta_path(stage)
        meta_path.unlink(missing_ok=True)
        arrays = arrays or {}
        for name, value in arrays.items():
            write_npy(self.folder / f"{stage}.{name}.npy", np.asarray(value))
        if table is not None:
            write_parquet(self.folder / f"{stage}.parquet", table)
        write_json(meta_path, {"key": key, "meta": meta or {},
                               "arrays": {name: [list(np.shape(a)), str(np.asarray(a).dtype)]
                                          for name, a in sorted(arrays.items())},
                               "table": None if table is None else table.height})

    def remove_parts(self, stage: str, *, keep: int) -> None:
        """Delete the checkpoints "STAGE.NNNNN" numbered `keep` and above (left by a longer input)."""
        for meta in self.folder.glob(f"{stage}.[0-9][0-9][0-9][0-9][0-9].json"):
            part = meta.name[len(stage) + 1 : -len(".json")]
            if int(part) >= keep:
                meta.unlink()
                for data in self.folder.glob(f"{stage}.{part}.*"):
                    data.unlink()
