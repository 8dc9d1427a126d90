"""Approximate candidates for the facet graph's prefilter: a FAISS inverted-file index (IVF-Flat, inner
product) or an HNSW graph in place of the exact blocked search where the exact one stops scaling.

The exact prefilter (`graft.similarity.prefilter_blocks`) compares every paper's pooled facet vector with
every other's: n^2 d multiply-adds, 49.5 s a facet at 96k vectors on 2 cores and growing with n^2
(docs/results/graph_scale.md). An IVF index clusters the corpus's vectors into L lists (k-means, L = 2
sqrt(n)) and compares a query only with the vectors of its `nprobe` nearest lists. FAISS returns a
shortlist of c rows per query (c + 1 with the query's own row, left out) with their inner products,
ordered here by (score descending, row) as the exact prefilter orders them: with every list probed
the candidates are the exact ones (but where two cosines differ by float32 rounding, which FAISS and
BLAS sum in another order). The graph then scores its candidates exactly, as before (`graft.edges`). The measured trade-off of lists, probes and time is in docs/results/ann_candidates.md.

HNSW (`HNSWCandidates`, `--candidates hnsw`, what "auto" takes) links every vector to its M nearest
found so far and answers a query by a greedy walk over those links (efSearch entries kept). At 16
probes IVF's recall falls as the corpus grows (0.919 of the exact top 20 at 10^6 vectors) where
HNSW's holds (0.973), for about the same time (docs/results/ann_growth_1e6.md). Its graph lives in
memory and is read whole, so a built index keeps an IVF index for the queries from outside the
corpus, which read only the lists they probe (`graft.external.CorpusScorer.searchers`).

FAISS (faiss-cpu) is imported only when this path runs; the default build of a corpus below
`FAISS_MIN_PAPERS` papers never imports it.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError, GraftError
from graft.similarity import best_columns

#: `candidates` settings: "exact" (blocked brute force), "faiss" (IVF-Flat), "hnsw" (an HNSW graph for
#: the build's search, IVF-Flat for queries), "auto" (HNSW from `FAISS_MIN_PAPERS` papers on).
CANDIDATE_METHODS = ("auto", "exact", "faiss", "hnsw")
#: Papers from which "auto" searches approximately (an HNSW graph: it keeps more of the exact top 20
#: than IVF-Flat at 10^5 and 10^6 vectors, docs/results/ann_growth_1e6.md): below it the exact
#: prefilter costs a few seconds a facet and keeps every candidate (docs/results/ann_candidates.md).
FAISS_MIN_PAPERS = 50_000
#: IVF lists probed per query: 16 of 2 sqrt(n) kept 0.97 of the exact top 20 at 24k-96k vectors
#: (docs/results/graph_scale.md, docs/results/ann_candidates.md).
FAISS_NPROBE = 16
#: IVF lists per sqrt(n) (L = 2 sqrt(n): 162 lists at cs768's 6,545 papers, 2,000 at 10^6).
LISTS_PER_ROOT = 2.0
#: k-means training rows per list (FAISS warns below 39; the sample is drawn with a fixed seed).
TRAIN_PER_LIST = 64
#: Query rows per FAISS search call (FAISS spreads one call's queries over its threads).
SEARCH_ROWS = 4096
#: Seed of the k-means sample and initial centroids (the same corpus gives the same lists).
SEED = 1234
#: HNSW: neighbours a node (M), the candidate list while inserting (efConstruction), and entries kept
#: while searching (efSearch, at least the candidates asked for); docs/results/ann_growth_1e6.md.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 40
HNSW_EF_SEARCH = 128


@dataclass(frozen=True)
class CandidateSearch:
    """How the graph's prefilter finds each paper's facet-similar candidates (`BuildConfig.candidates`)."""

    method: str = "exact"  # "auto", "exact", "faiss" or "hnsw" (`CANDIDATE_METHODS`)
    min_papers: int = FAISS_MIN_PAPERS  # "auto" takes HNSW from this many papers on
    nprobe: int = FAISS_NPROBE  # IVF lists searched per query
    lists: int | None = None  # IVF lists; None = LISTS_PER_ROOT x sqrt(n)
    hnsw_m: int = HNSW_M  # HNSW neighbours a node
    hnsw_ef: int = HNSW_EF_SEARCH  # HNSW entries kept while searching

    def __post_init__(self) -> None:
        if self.method not in CANDIDATE_METHODS:
            raise ConfigError(f"candidates {self.method!r} is unknown; allowed: {', '.join(CANDIDATE_METHODS)}")
        wrong = [f"{name}={getattr(self, name)!r}" for name in ("min_papers", "nprobe", "lists", "hnsw_m", "hnsw_ef")
                 if getattr(self, name) is not None and getattr(self, name) < 1]
        if wrong:
            raise ConfigError(f"{', '.join(wrong)}: must be >= 1 (lists: or None for 2 sqrt(n))")

    def resolve(self, n: int) -> str:
        """"exact", "faiss" or "hnsw" for a corpus of n papers."""
        if self.method == "auto":
            return "hnsw" if n >= self.min_papers else "exact"
        return self.method

    def n_lists(self, n: int) -> int:
        """IVF lists for n vectors: `lists`, or 2 sqrt(n); never more than n."""
        want = self.lists if self.lists is not None else round(LISTS_PER_ROOT * math.sqrt(max(n, 1)))
        return int(max(1, min(want, n)))


def _faiss() -> Any:
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        raise GraftError("approximate candidates need FAISS: pip install faiss-cpu (or build with "
                         "candidates 'exact')") from None
    return faiss


class _FaissSearcher:
    """What the IVF index and the HNSW graph share: n corpus vectors, searched for each query row's
    c best candidates (`search`), and sent to another process as bytes (`to_bytes`)."""

    n: int
    index: Any

    def to_bytes(self) -> bytes:
        """The filled index as bytes (FAISS's own format), for another process to search."""
        return _faiss().serialize_index(self.index).tobytes()

    def search(self, query: np.ndarray, c: int, *, self_rows: np.ndarray | None = None) -> np.ndarray:
        """(b, c) int64 corpus rows of each query row's c best candidates, best first, equal scores by
        lower row (as `best_columns`). `self_rows`: per query, a corpus row never returned (its own)."""
        q = np.ascontiguousarray(query, dtype=np.float32)
        c = max(0, min(c, self.n - (1 if self_rows is not None else 0)))
        if q.shape[0] == 0 or c == 0:
            return np.zeros((q.shape[0], c), dtype=np.int64)
        k = min(self.n, c + (1 if self_rows is not None else 0))
        scores, found = self._search(q, k)
        return _ranked(scores, found, c, self_rows, lambda r: self._exact_row(q[r : r + 1]))

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _exact_row(self, q: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class IVFCandidates(_FaissSearcher):
    """An IVF-Flat inner-product index over a corpus's unit vectors, searched for candidates.

    Args:
        corpus: (n, d) float32 unit rows (zero rows are allowed: a paper without items of the facet);
            None with `index`: the vectors the index holds (a query's searcher, which never needs
            them whole).
        search: lists and probes (`CandidateSearch`).
        index: an index already trained and filled with `corpus` (`read`); None trains one.
    """

    def __init__(self, corpus: np.ndarray | None, search: CandidateSearch, index: Any = None) -> None:
        faiss = _faiss()
        if corpus is None:
            if index is None:
                raise GraftError("IVFCandidates needs the corpus's vectors or an index filled with them")
            self.corpus = None
            n, d = int(index.ntotal), int(index.d)
        else:
            self.corpus = np.ascontiguousarray(corpus, dtype=np.float32)
            n, d = self.corpus.shape
        self.n = n
        if index is None:
            lists = search.n_lists(n)
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, lists, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = SEED
            index.cp.min_points_per_centroid = 1  # small corpora: no warning, the sample below decides
            rng = np.random.default_rng(SEED)
            sample = min(n, lists * TRAIN_PER_LIST)
            train = self.corpus if sample == n else self.corpus[np.sort(rng.choice(n, sample, replace=False))]
            index.train(train)
            index.add(self.corpus)
        elif index.ntotal != n or index.d != d:
            raise GraftError(f"the FAISS index holds {index.ntotal} vectors of {index.d} dimensions, the corpus "
                             f"{n} of {d}: it belongs to another build; rebuild the index")
        index.nprobe = int(min(search.nprobe, index.nlist))
        self.index = index

    @property
    def lists(self) -> int:
        return int(self.index.nlist)

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(q, k)

    def _exact_row(self, q: np.ndarray) -> np.ndarray:
        """(1, n) inner products of one query with every corpus vector."""
        if self.corpus is not None:
            return q @ self.corpus.T
        row = np.full((1, self.n), -np.inf, dtype=np.float32)  # every list probed: the vectors the index holds
        params = _faiss().SearchParametersIVF(nprobe=int(self.index.nlist))
        found_all, at = self.index.search(q, self.n, params=params)
        ok = at[0] >= 0
        row[0, at[0][ok]] = found_all[0][ok]
        return row

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the index (FAISS's own format), atomically."""
        faiss = _faiss()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            faiss.write_index(self.index, tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    @classmethod
    def read(cls, path: str | os.PathLike[str], corpus: np.ndarray | None, search: CandidateSearch,
             n: int | None = None) -> IVFCandidates:
        """An index written by `write`, for the same corpus vectors (None: those it holds, which
        must then number `n`).

        Raises:
            GraftError: the file is not a FAISS index, or holds another number of vectors.
        """
        faiss = _faiss()
        try:  # memory-mapped: a query reads the lists it probes, not the whole file
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError as exc:
            raise GraftError(f"{path}: not a readable FAISS index ({str(exc).splitlines()[0]}); rebuild the "
                             "index") from None
        if corpus is None and n is not None and int(index.ntotal) != n:
            raise GraftError(f"{path}: the FAISS index holds {index.ntotal} vectors, the corpus {n} papers: it "
                             "belongs to another build; rebuild the index")
        return cls(corpus, search, index=index)


def _ranked(scores: np.ndarray, found: np.ndarray, c: int, self_rows: np.ndarray | None,
            exact_row: Callable[[int], np.ndarray]) -> np.ndarray:
    """(b, c) candidates from a FAISS search's (scores, rows): a query's own row left out, ordered
    by (score descending, row) as `best_columns` orders them; a query the index answered with fewer
    than c rows is searched exactly (`exact_row(r)`: its (1, n) inner products)."""
    found = found.astype(np.int64)
    scores = np.where(found < 0, -np.inf, scores)  # a list ran short, or the walk found fewer
    if self_rows is not None:
        scores[found == np.asarray(self_rows, dtype=np.int64)[:, None]] = -np.inf
    order = np.lexsort((found, -scores), axis=1)[:, :c]
    out = np.take_along_axis(found, order, axis=1)
    short = np.flatnonzero(~np.isfinite(np.take_along_axis(scores, order, axis=1)).all(axis=1))
    for r in short.tolist():
        row = exact_row(r)
        if self_rows is not None:
            row[0, int(self_rows[r])] = -np.inf
        out[r] = best_columns(row, c)[0]
    return out


class HNSWCandidates(_FaissSearcher):
    """An HNSW inner-product graph (FAISS IndexHNSWFlat) over a corpus's unit vectors, searched for
    candidates: the graph stage's searcher with `candidates` "hnsw" (the module docstring).

    Args:
        corpus: (n, d) float32 unit rows (zero rows allowed: a paper without items of the facet).
        search: M and efSearch (`CandidateSearch.hnsw_m`, `.hnsw_ef`).
        index: a graph already filled with `corpus` (`from_bytes`); None inserts every row, one thread
            at a time in row order, so that the same vectors give the same graph.
    """

    def __init__(self, corpus: np.ndarray, search: CandidateSearch, index: Any = None) -> None:
        faiss = _faiss()
        self.corpus = np.ascontiguousarray(corpus, dtype=np.float32)
        self.n, d = self.corpus.shape
        self.settings = search
        if index is None:
            index = faiss.IndexHNSWFlat(d, search.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)  # parallel insertion orders the links by thread timing
            try:
                index.add(self.corpus)
            finally:
                faiss.omp_set_num_threads(threads)
        elif index.ntotal != self.n or index.d != d:
            raise GraftError(f"the HNSW graph holds {index.ntotal} vectors of {index.d} dimensions, the corpus "
                             f"{self.n} of {d}: it belongs to another build")
        self.index = index

    def ef_search(self, k: int) -> int:
        """Entries kept while searching for k rows: efSearch, and never fewer than k."""
        return max(self.settings.hnsw_ef, k)

    def _search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(q, k, params=_faiss().SearchParametersHNSW(efSearch=self.ef_search(k)))

    def _exact_row(self, q: np.ndarray) -> np.ndarray:
        return q @ self.corpus.T


Searcher = IVFCandidates | HNSWCandidates


def graph_searcher(corpus: np.ndarray, search: CandidateSearch) -> Searcher | None:
    """The searcher of the graph stage for these n vectors: an IVF index, an HNSW graph, or None
    where the candidates are exact (`CandidateSearch.resolve`)."""
    method = search.resolve(len(corpus))
    if method == "faiss":
        return IVFCandidates(corpus, search)
    if method == "hnsw":
        return HNSWCandidates(corpus, search)
    return None


def searcher_from_bytes(corpus: np.ndarray, search: CandidateSearch, data: bytes) -> Searcher:
    """The searcher a `to_bytes` came from (an IVF index or an HNSW graph), over the same vectors."""
    index = _faiss().deserialize_index(np.frombuffer(data, dtype=np.uint8))
    if hasattr(index, "hnsw"):
        return HNSWCandidates(corpus, search, index=index)
    return IVFCandidates(corpus, search, index=index)


def candidate_blocks(
    query: np.ndarray,
    corpus: np.ndarray,
    n_candidates: int,
    searcher: Searcher,
    *,
    exclude_self: bool = True,
    block_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
    offset: int = 0,
) -> Iterator[tuple[int, np.ndarray]]:
    """`graft.similarity.prefilter_blocks` through an approximate searcher: (start, (block, c) candidates) per
    block of query rows; with `exclude_self`, query row i is corpus row offset + i and never its own
    candidate (start is a corpus row too)."""
    block_rows = block_rows or SEARCH_ROWS
    for start in range(0, query.shape[0], block_rows):
        q = query[start : start + block_rows]
        own = np.arange(offset + start, offset + start + q.shape[0]) if exclude_self else None
        yield offset + start, searcher.search(q, n_candidates, self_rows=own)
        if progress is not None:
            progress(q.shape[0])
