"""A static sentence-transformers model run in NumPy: a `StaticEmbedding` (one vector per vocabulary
token; a text is the mean of its tokens' vectors) and a `Normalize`, the layout
`training/static_encoder.py` writes. Its table and tokenizer load in milliseconds, where loading it
through sentence-transformers imports torch and transformers first (~5 s): a query on an index built
with such an encoder then embeds its text at once.

The vectors are sentence-transformers' own to float32 rounding: the same tokenizer call (no special
tokens, no padding), the mean of the same rows (torch's `EmbeddingBag`, which sums in another order),
zero for a text without tokens, then unit length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: The module types of the one layout this runs (sentence-transformers' class paths end so).
_LAYOUT = ("StaticEmbedding", "Normalize")


def static_layout(path: str | Path) -> bool:
    """Whether the model folder `path` is a StaticEmbedding at its root followed by a Normalize,
    with its table in `model.safetensors` and its tokenizer in `tokenizer.json`."""
    folder = Path(path)
    try:
        modules = json.loads((folder / "modules.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(modules, list) or len(modules) != 2 or not all(isinstance(m, dict) for m in modules):
        return False
    kinds = tuple(str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules)
    return (kinds == _LAYOUT and modules[0].get("path", "") == ""
            and (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file())


class StaticTable:
    """The model of a `static_layout` folder: `encode(texts)` -> float32 unit rows.

    Raises:
        ValueError: the weights file holds no `embedding.weight` table of the tokenizer's vocabulary.
    """

    def __init__(self, path: str | Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(path)
        weights: dict[str, Any] = load_file(str(folder / "model.safetensors"))
        table = weights.get("embedding.weight")
        if table is None or table.ndim != 2:
            raise ValueError(f"{folder / 'model.safetensors'} holds no 2-D 'embedding.weight' table")
        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.no_padding()
        if self.tokenizer.get_vocab_size() > len(self.table):
            raise ValueError(f"{folder}: the tokenizer has {self.tokenizer.get_vocab_size()} tokens, the table "
                             f"{len(self.table)} rows")
        self.dim = int(self.table.shape[1])

    def encode(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit rows (zero for a text without tokens)."""
        ids = [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        lengths = np.array([len(i) for i in ids], dtype=np.int64)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if lengths.sum():
            flat = np.fromiter((t for i in ids for t in i), dtype=np.int64, count=int(lengths.sum()))
            starts = np.r_[0, np.cumsum(lengths)[:-1]]
            has = lengths > 0
            out[has] = np.add.reduceat(self.table[flat], starts[has], axis=0) / lengths[has, None]
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def encode_tokens(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, None]:
        """`graft.encoder.Encoder.read_in_context`'s pass: the texts' vectors, and no token states (a
        static model has none, so no span is read)."""
        n = len(texts)
        return self.encode(texts), np.zeros((n, 1, self.dim), np.float32), np.zeros((n, 1), bool), None
