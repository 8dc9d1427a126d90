"""Typed top-K facet graph: w_f(i, j) = alpha * s_f(i, j) + beta * cite(i, j), top K out-edges per row.

s_f is the items' symmetric mean best-match cosine, blended with the cosine of the two papers' lexical
rows for the facet where the items carry them (`graft.lexical`): s_f = (1 - λ) dense + λ lexical,
λ = `GraphParams.lexical_weight`.

Candidates of row i are the union of its facet-similar papers (prefilter over pooled facet vectors)
and its coupled or co-cited papers (shared references, shared citers); with `direct_links`, the
papers it cites or is cited by too. Every candidate is scored exactly; the K best by (-weight,
column) are kept, so the result is deterministic.

A direct citation link is neither an edge term nor, by default, a candidate source: it is what the
evaluation takes as the gold (the reference design uses it only as the out-of-corpus gold), and a
graph that lists a paper's cited papers as candidates would find them through the link itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from graft.ann import SEARCH_ROWS, CandidateSearch, Searcher, candidate_blocks, graph_searcher
from graft.lexical import blend, pair_cosines
from graft.similarity import FacetItemsMatrix, block_rows_for, prefilter_blocks, score_gathered, score_pairs
from graft.similarity import sorted_unique as _unique  # a name of this module: benchmarks swap it

#: Coupled or co-cited papers scored as graph candidates per paper, the strongest by citation score: on
#: cs768 (dev index, 179 a paper on average, up to 2,509) 100 keep 99.6% of the edges of all of them
#: and the same teacher recall (docs/results/linked_cap_cs768.md); their number grows with the
#: corpus, so without a cap the graph stage grows faster than n (docs/scale.md).
LINKED_CANDIDATES = 100


@dataclass(frozen=True)
class GraphParams:
    top_k: int = 20  # K: out-edges kept per paper and facet, as in the GRAFT paper
    alpha: float = 0.75  # weight of facet similarity in the edge weight (GRAFT paper)
    beta: float = 0.25  # weight of the citation score in the edge weight (GRAFT paper)
    n_candidates: int = 100  # facet-similar candidates per paper from the pooled-vector prefilter
    block_rows: int | None = None  # rows per prefilter block; None sizes blocks to ~128 MiB
    direct_links: bool = False  # direct citation links (either way) as extra candidates; off in the reference design
    # coupled or co-cited candidates kept per paper: the strongest by citation score (0 = all of them)
    linked_candidates: int = LINKED_CANDIDATES
    # the prefilter: exact blocked search, or a FAISS IVF index from a size on (`graft.ann`)
    candidates: CandidateSearch = field(default_factory=CandidateSearch)
    # λ: share of the lexical cosine in facet similarity, where the items carry lexical rows (`graft.lexical`)
    lexical_weight: float = 0.0


def facet_similarity(left: FacetItemsMatrix, rows: np.ndarray, right: FacetItemsMatrix | None, cols: np.ndarray,
                     params: GraphParams) -> np.ndarray:
    """s_f of the pairs (left row rows[k], right row cols[k]) clipped to [0, 1]: the items' mean
    best-match cosine (`score_gathered` within one matrix when `right` is None, `score_pairs`
    otherwise), blended with the lexical rows' cosine at `params.lexical_weight` where both sides
    carry lexical rows."""
    other = left if right is None else right
    dense = score_gathered(left, rows, cols) if right is None else score_pairs(left, rows, right, cols)
    if params.lexical_weight > 0 and left.lexical is not None and other.lexical is not None:
        dense = blend(dense, pair_cosines(left.lexical, rows, other.lexical, cols), params.lexical_weight)
    return np.clip(dense, 0.0, 1.0)


def _top_k_rows(rows: np.ndarray, cols: np.ndarray, weights: np.ndarray, k: int) -> np.ndarray:
    """Indices into (rows, cols, weights) of each row's k best entries by (-weight, col), in that
    order.

    The graph's entries come sorted by (row, col) with float32 weights >= 0, whose bits order as
    the weights do: one stable sort of a packed 64-bit key (row, then the weight's bits inverted)
    leaves ties in column order, as a three-key lexsort does, in about an eighth of its time on
    cs768's 2.5 million candidate pairs a facet. Other input takes the lexsort.
    """
    packable = (weights.dtype == np.float32 and len(rows) and int(rows.min()) >= 0
                and int(rows.max()) < 2**31 and not (weights < 0).any() and not np.isnan(weights).any())
    if packable:
        pair = rows.astype(np.int64) * (int(cols.max()) + 1) + cols
        packable = bool(np.all(pair[1:] > pair[:-1]))
    if packable:
        bits = (weights + np.float32(0)).view(np.uint32).astype(np.uint64)  # + 0: -0.0 becomes 0.0
        order = np.argsort((rows.astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - bits),
                           kind="stable")
    else:
        order = np.lexsort((cols, -weights, rows))
    r = rows[order]
    first = np.searchsorted(r, r, side="left")
    rank = np.arange(len(r)) - first
    return order[rank < k]


def strongest_per_row(m: sp.csr_matrix, k: int) -> sp.csr_matrix:
    """`m` with only each row's `k` largest entries (ties: the lower column first); `k` = 0 keeps all.

    The graph's citation-linked candidates: every coupled or co-cited paper is scored exactly, and
    their number per paper grows with the corpus (heavily cited references couple thousands of
    papers), so a build keeps the `GraphParams.linked_candidates` strongest (docs/scale.md)."""
    m = sp.csr_matrix(m, dtype=np.float32)
    if k <= 0 or m.nnz == 0 or int(np.diff(m.indptr).max()) <= k:
        return m
    m.sort_indices()
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    sel = np.sort(_top_k_rows(rows, m.indices.astype(np.int64), m.data, k))
    out = sp.csr_matrix((m.data[sel], (rows[sel], m.indices[sel])), shape=m.shape, dtype=np.float32)
    out.sort_indices()
    return out


def _lookup(m: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """m[rows[k], cols[k]] for aligned index arrays (0 where absent)."""
    if len(rows) == 0 or m.nnz == 0:
        return np.zeros(len(rows), dtype=np.float32)
    return np.asarray(m[rows, cols]).ravel().astype(np.float32)


def graph_block_rows(n: int, params: GraphParams) -> int:
    """Rows per candidate block of a facet graph of n papers (the prefilter's blocks): a slice of
    rows starting at a multiple of it is computed block for block as the whole graph is."""
    if params.candidates.resolve(n) != "exact":
        return params.block_rows or SEARCH_ROWS
    return params.block_rows or block_rows_for(n)


def graph_row_ranges(n: int, params: GraphParams, parts: int) -> list[tuple[int, int]]:
    """About `parts` consecutive row ranges covering 0..n, each a whole number of candidate blocks
    (`graph_block_rows`): the work units of a distributed graph stage."""
    block = graph_block_rows(n, params)
    blocks = max(1, -(-n // block))
    per = max(1, -(-blocks // max(1, parts)))
    return [(b * block, min(n, (b + per) * block)) for b in range(0, blocks, per)] if n else []


def facet_graph_rows(
    items: FacetItemsMatrix,
    cite_score: sp.csr_matrix,
    cite_links: sp.csr_matrix,
    params: GraphParams,
    start: int,
    stop: int,
    *,
    progress: Callable[[int], None] | None = None,
    searcher: Searcher | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows start..stop of one facet's top-K graph (`facet_graph`) as (rows, cols, weights), sorted
    by row then weight; `start` a multiple of `graph_block_rows` so that the numbers are those of the
    whole graph's."""
    n = items.n
    cite_score = sp.csr_matrix(cite_score)
    links = sp.csr_matrix(cite_links)
    out_rows: list[np.ndarray] = [np.zeros(0, np.int64)]
    out_cols: list[np.ndarray] = [np.zeros(0, np.int64)]
    out_w: list[np.ndarray] = [np.zeros(0, np.float32)]
    query = items.pooled[start:stop]
    block = graph_block_rows(n, params)
    if params.candidates.resolve(n) != "exact":
        searcher = searcher or graph_searcher(items.pooled, params.candidates)
        blocks = candidate_blocks(query, items.pooled, params.n_candidates, searcher, block_rows=block,
                                  progress=progress, offset=start)
    else:
        blocks = prefilter_blocks(query, items.pooled, params.n_candidates, block_rows=block, progress=progress,
                                  offset=start)
    for first, cand in blocks:
        b = cand.shape[0]
        rows = np.repeat(np.arange(first, first + b), cand.shape[1])
        cols = cand.ravel()
        block_links = links[first : first + b].tocoo()
        rows = np.concatenate([rows, block_links.row.astype(np.int64) + first])
        cols = np.concatenate([cols, block_links.col.astype(np.int64)])
        keys = _unique(rows * n + cols)
        rows, cols = keys // n, keys % n
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
        sim = facet_similarity(items, rows, None, cols, params)
        w = params.alpha * sim + params.beta * _lookup(cite_score, rows, cols)
        sel = _top_k_rows(rows, cols, w, params.top_k)
        sel = sel[w[sel] > 0]
        out_rows.append(rows[sel])
        out_cols.append(cols[sel])
        out_w.append(w[sel])
    return np.concatenate(out_rows), np.concatenate(out_cols), np.concatenate(out_w).astype(np.float32)


def graph_from_rows(n: int, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> sp.csr_matrix:
    """The n x n CSR graph of the (rows, cols, weights) of `facet_graph_rows` over disjoint ranges."""
    g = sp.csr_matrix((np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.float32),
                       (np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64),
                        np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64))),
                      shape=(n, n), dtype=np.float32)
    g.sort_indices()
    return g


def facet_graph(
    items: FacetItemsMatrix,
    cite_score: sp.csr_matrix,
    cite_links: sp.csr_matrix,
    params: GraphParams,
    *,
    progress: Callable[[int], None] | None = None,
    searcher: Searcher | None = None,
) -> sp.csr_matrix:
    """Build one facet's top-K graph.

    Args:
        items: the facet's grouped item embeddings (n papers).
        cite_score: n x n citation score in [0, 1] (coupling + co-citation).
        cite_links: n x n pattern of citation-linked pairs used as extra candidates.
        params: K, alpha, beta and prefilter settings.
        progress: called with the number of rows finished.
        searcher: the IVF index or HNSW graph of `items.pooled` where `params.candidates` resolves
            to one for n papers (made here when None); unused by the exact prefilter.
    Returns:
        n x n CSR, row i = i's top-K out-edges, weights in [0, 1].
    """
    return graph_from_rows(items.n, [facet_graph_rows(items, cite_score, cite_links, params, 0, items.n,
                                                      progress=progress, searcher=searcher)])


def external_facet_row(
    query: FacetItemsMatrix,
    items: FacetItemsMatrix,
    cite_row: sp.csr_matrix,
    params: GraphParams,
    searcher: Searcher | None = None,
) -> sp.csr_matrix:
    """Top-K edge row (1 x n) for one paper outside the corpus, scored exactly like corpus rows.

    Args:
        query: the new paper's facet items grouped as a 1-row matrix (with its lexical row where the
            corpus's items carry theirs).
        items: the corpus' grouped items of the same facet.
        cite_row: 1 x n citation score of the new paper (bibliographic coupling only).
        searcher: the corpus's IVF index of the facet, for an index built with approximate
            candidates (`params.candidates`); None = the exact prefilter.
    """
    n = items.n
    if searcher is not None:
        cand = searcher.search(query.pooled, params.n_candidates)
    else:
        _, cand = next(prefilter_blocks(query.pooled, items.pooled, params.n_candidates, exclude_self=False))
    cite_row = sp.csr_matrix(cite_row)
    linked = strongest_per_row(cite_row, params.linked_candidates)
    cols = np.unique(np.concatenate([cand[0], linked.indices.astype(np.int64)]))
    rows = np.zeros(len(cols), dtype=np.int64)
    sim = facet_similarity(query, rows, items, cols, params)
    w = params.alpha * sim + params.beta * _lookup(cite_row, rows, cols)
    sel = _top_k_rows(rows, cols, w, params.top_k)
    sel = sel[w[sel] > 0]
    return sp.csr_matrix((w[sel], (rows[sel], cols[sel])), shape=(1, n), dtype=np.float32)
