"""Lexical similarity: TF-IDF over a corpus's own words, the half of facet and text similarity that
one sentence embedding misses.

MiniLM places "few-shot classification with prototypes" near every few-shot paper; a rare shared
term ("prototypical", "Omniglot", "MAML") says which of them are about the same thing. A build fits a
`Lexicon` on its papers' title + abstract (words of two letters or more, lower-cased, English stop
words out, terms in at least `MIN_DF` papers, smoothed IDF) and gives every paper unit TF-IDF rows
(sub-linear term frequency):

- one per facet, of its title and that facet's items joined (`embeddings/lexical_{facet}.npz`): a
  facet's similarity s_f blends the items' mean best-match cosine with the cosine of these rows,
  s_f = (1 - λ) dense + λ lexical (`graft.edges`, `BuildConfig.lexical_weight`);
- one of its title + abstract (`embeddings/lexical_papers.npz`): text coupling, which fills the
  citation half of a paper without citation links, ranks its neighbours by (1 - μ) dense + μ lexical
  (`graft.citations.text_coupling`, `BuildConfig.text_lexical_weight`).

A paper outside the corpus is turned into the same rows with the stored lexicon
(`embeddings/lexicon.parquet`: the terms in column order and their IDF), so it is scored as corpus
papers were. On cs768's leak-free dev part both blends together lift the graph teacher from 0.297 to
0.332 R@20 (docs/facets.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from graft.facets import FACETS

#: λ: the lexical cosine's share in facet similarity (`BuildConfig.lexical_weight`). Tuned on cs768's
#: leak-free dev part with μ = 0.5: 0.2 / 0.35 / 0.5 / 0.6 / 0.7 gave the facet-only graphs 0.280 / 0.284 /
#: 0.290 / 0.284 / 0.281 R@20 (dense 0.287), the teacher 0.329 / 0.332 / 0.333 / 0.330 / 0.329 and
#: teacher-cite 0.382 / 0.384 / 0.377 / 0.379 / 0.377; 0.5 is the one that meets all three of the
#: facets' targets there (≥ 1×, 1.15× and 1.3× dense; docs/results/lexical_grid_cs768.md).
LEXICAL_WEIGHT = 0.5

#: μ: its share in text coupling (`BuildConfig.text_lexical_weight`). At λ = 0.35, μ = 0.3 / 0.5 / 0.7
#: gave 0.330 / 0.332 / 0.325 and 0.380 / 0.384 / 0.383.
TEXT_LEXICAL_WEIGHT = 0.5

#: A term counts when at least this many papers use it (a typo or one paper's name says nothing of
#: what two papers share).
MIN_DF = 2

#: The lexicon's file, and the stored rows' (`lexical_file`), relative to an index.
LEXICON_FILE = "embeddings/lexicon.parquet"

#: The rows stored per index: one set per facet and one of the papers' title + abstract.
LEXICAL_SETS = (*FACETS, "papers")

#: Pairs whose rows are multiplied at once in `pair_cosines` (bounds the gathered temporaries).
PAIR_CHUNK = 1 << 16


def lexical_file(name: str) -> str:
    """The stored TF-IDF rows of one of `LEXICAL_SETS`, relative to an index."""
    return f"embeddings/lexical_{name}.npz"


def _counter(vocabulary: dict[str, int] | None = None, min_df: int = 1) -> Any:
    """scikit-learn's word counter with the lexicon's tokenisation."""
    from sklearn.feature_extraction.text import CountVectorizer

    return CountVectorizer(lowercase=True, stop_words="english", vocabulary=vocabulary, min_df=min_df,
                           dtype=np.float32)


@dataclass(frozen=True)
class Lexicon:
    """A corpus's terms (sorted: a term's column is its place) and their IDF, ln((1 + N) / (1 + df)) + 1."""

    terms: tuple[str, ...]
    idf: np.ndarray  # (V,) float32

    @classmethod
    def fit(cls, texts: Sequence[str], min_df: int = MIN_DF) -> Lexicon:
        """The lexicon of a corpus's texts (terms in at least `min_df` of them); an empty one when
        no term qualifies (a tiny or empty corpus)."""
        texts = [str(t or "") for t in texts]
        try:
            counter = _counter(min_df=min(min_df, max(1, len(texts))))
            counts = counter.fit_transform(texts)
        except ValueError:  # no term at all (empty texts, or only stop words)
            return cls((), np.zeros(0, dtype=np.float32))
        df = np.asarray((counts > 0).sum(axis=0)).ravel()
        terms = counter.get_feature_names_out().tolist()
        idf = np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0
        return cls(tuple(terms), idf.astype(np.float32))

    @property
    def size(self) -> int:
        return len(self.terms)

    @cached_property
    def _vocabulary(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.terms)}

    def vectors(self, texts: Sequence[str]) -> sp.csr_matrix:
        """(len(texts), V) float32 CSR: each text's TF-IDF row, (1 + ln tf) x idf, L2-normalised
        (an empty row where it has no term of the lexicon)."""
        texts = [str(t or "") for t in texts]
        if not self.terms:
            return sp.csr_matrix((len(texts), 0), dtype=np.float32)
        counts = sp.csr_matrix(_counter(self._vocabulary).transform(texts), dtype=np.float32)
        counts.data = (1.0 + np.log(counts.data)) * self.idf[counts.indices]
        norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
        out = sp.csr_matrix(sp.diags(scale.astype(np.float32)) @ counts, dtype=np.float32)
        out.sort_indices()
        return out

    def write(self, path: Path) -> None:
        """The lexicon as a Parquet table (term, idf), in column order, written atomically."""
        import polars as pl

        from graft.store import write_parquet

        write_parquet(path, pl.DataFrame({"term": list(self.terms), "idf": self.idf.astype(np.float32)},
                                         schema={"term": pl.Utf8, "idf": pl.Float32}))

    @classmethod
    def read(cls, path: Path) -> Lexicon:
        """A lexicon `write` wrote.

        Raises:
            ValueError: not a lexicon table (columns, order or values wrong).
        """
        import polars as pl

        table = pl.read_parquet(path)
        if table.columns != ["term", "idf"]:
            raise ValueError(f"columns {table.columns}, not ['term', 'idf']")
        terms = tuple(str(t) for t in table["term"].to_list())
        idf = table["idf"].to_numpy().astype(np.float32)
        if any(a >= b for a, b in zip(terms, terms[1:])):
            raise ValueError("its terms are not sorted and distinct")
        if len(idf) and not (np.isfinite(idf).all() and (idf > 0).all()):
            raise ValueError("its IDF values are not positive finite numbers")
        return cls(terms, idf)


def facet_texts(titles: Sequence[str], owner: np.ndarray, facet_of_item: np.ndarray, texts: Sequence[str],
                n: int) -> dict[str, list[str]]:
    """Per facet, each paper's title and its items of the facet joined ("Title. item item ..."), in
    paper order (a paper without items of the facet: its title alone)."""
    joined: dict[str, list[list[str]]] = {f: [[] for _ in range(n)] for f in FACETS}
    for r, f, t in zip(np.asarray(owner).tolist(), np.asarray(facet_of_item).tolist(), texts):
        joined[str(f)][r].append(str(t))
    return {f: [" ".join([str(titles[r] or "") + ".", *parts]) for r, parts in enumerate(lists)]
            for f, lists in joined.items()}


def facet_rows_of(lexicon: Lexicon, titles: Sequence[str], facets: Sequence[dict[str, Sequence[str]]],
                  ) -> list[dict[str, sp.csr_matrix]]:
    """Per paper (title, its facet items), facet -> its 1 x V lexical row, as a build makes the
    corpus's (`facet_texts`): for papers outside the corpus."""
    texts = [" ".join([str(title or "") + ".", *map(str, per.get(f, ()))]) for title, per in zip(titles, facets)
             for f in FACETS]
    rows = lexicon.vectors(texts)
    return [{f: rows[i * len(FACETS) + j] for j, f in enumerate(FACETS)} for i in range(len(facets))]


def pair_cosines(left: sp.csr_matrix, rows: np.ndarray, right: sp.csr_matrix, cols: np.ndarray,
                 chunk: int = PAIR_CHUNK) -> np.ndarray:
    """(P,) float32: the dot products of left row rows[k] with right row cols[k] (cosines of unit
    TF-IDF rows), `chunk` pairs at a time."""
    out = np.zeros(len(rows), dtype=np.float32)
    if not len(rows) or left.shape[1] == 0:
        return out
    for s in range(0, len(rows), chunk):
        a = left[np.asarray(rows[s : s + chunk], dtype=np.int64)]
        b = right[np.asarray(cols[s : s + chunk], dtype=np.int64)]
        out[s : s + chunk] = np.asarray(a.multiply(b).sum(axis=1)).ravel()
    return out


def blend(dense: np.ndarray, lexical: np.ndarray, weight: float) -> np.ndarray:
    """(1 - weight) x dense + weight x lexical, as float32 (dense unchanged at weight 0)."""
    if weight <= 0:
        return np.asarray(dense, dtype=np.float32)
    return ((1.0 - weight) * np.asarray(dense, dtype=np.float32) + weight * lexical).astype(np.float32)
