"""Facet similarity between papers from their embedded facet items, without dense n x n matrices.

s_f(i, j) is the symmetric mean of best-match cosines: each item of i is matched to its most similar
item of j and the cosines are averaged, the same from j to i, and the two means are averaged.

Candidates come from a blocked prefilter over mean-pooled facet vectors (one matmul of
`block_rows x n` at a time, so memory is bounded by the block, not by n^2); candidate pairs are then
scored exactly from the items.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np


@dataclass
class FacetItemsMatrix:
    """One facet's item embeddings, grouped by paper and padded to a fixed number of items."""

    padded: np.ndarray  # (n, L, d) float32; rows past a paper's item count are zero
    mask: np.ndarray  # (n, L) bool; True where an item exists
    pooled: np.ndarray  # (n, d) float32, L2-normalised mean of the items (zero if none)

    @property
    def n(self) -> int:
        return self.padded.shape[0]


def group_items(owner: np.ndarray, vectors: np.ndarray, n: int, max_items: int | None = None) -> FacetItemsMatrix:
    """Group item vectors by owning paper.

    Args:
        owner: (m,) paper row of each item.
        vectors: (m, d) unit item embeddings (float16 or float32).
        n: number of papers.
        max_items: keep at most this many items per paper (the first ones); None keeps all.
    """
    owner = np.asarray(owner, dtype=np.int64)
    vectors = np.asarray(vectors, dtype=np.float32)
    d = vectors.shape[1]
    counts = np.bincount(owner, minlength=n)
    width = max(1, int(counts.max()) if counts.size else 1)
    if max_items is not None:
        width = min(width, max_items)
    order = np.argsort(owner, kind="stable")
    sorted_owner = owner[order]
    starts = np.searchsorted(sorted_owner, np.arange(n))
    slot = np.arange(len(order)) - starts[sorted_owner]
    keep = slot < width
    padded = np.zeros((n, width, d), dtype=np.float32)
    mask = np.zeros((n, width), dtype=bool)
    padded[sorted_owner[keep], slot[keep]] = vectors[order[keep]]
    mask[sorted_owner[keep], slot[keep]] = True
    pooled = padded.sum(axis=1)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    pooled = np.divide(pooled, norms, out=np.zeros_like(pooled), where=norms > 0)
    return FacetItemsMatrix(padded=padded, mask=mask, pooled=pooled)


def pair_similarity(
    a_items: np.ndarray, a_mask: np.ndarray, b_items: np.ndarray, b_mask: np.ndarray
) -> np.ndarray:
    """Symmetric mean best-match cosine of aligned pairs.

    Args:
        a_items, b_items: (P, L, d) padded item vectors of the two sides of P pairs.
        a_mask, b_mask: (P, L) item masks.
    Returns:
        (P,) float32 similarities; 0 where either side has no item.
    """
    sims = np.einsum("pld,pmd->plm", a_items, b_items, optimize=True)
    valid = a_mask[:, :, None] & b_mask[:, None, :]
    sims = np.where(valid, sims, -np.inf)
    a_best = sims.max(axis=2)  # each item of a against its best item of b
    b_best = sims.max(axis=1)
    a_cnt = a_mask.sum(axis=1)
    b_cnt = b_mask.sum(axis=1)
    a_mean = np.where(a_mask, a_best, 0.0).sum(axis=1) / np.maximum(a_cnt, 1)
    b_mean = np.where(b_mask, b_best, 0.0).sum(axis=1) / np.maximum(b_cnt, 1)
    out = 0.5 * (a_mean + b_mean)
    return np.where((a_cnt > 0) & (b_cnt > 0), out, 0.0).astype(np.float32)


def score_pairs(
    left: FacetItemsMatrix, rows: np.ndarray, right: FacetItemsMatrix, cols: np.ndarray, chunk: int = 8192
) -> np.ndarray:
    """Exact facet similarity of pairs (left row `rows[k]`, right row `cols[k]`), in chunks."""
    out = np.empty(len(rows), dtype=np.float32)
    for s in range(0, len(rows), chunk):
        r = rows[s : s + chunk]
        c = cols[s : s + chunk]
        out[s : s + chunk] = pair_similarity(left.padded[r], left.mask[r], right.padded[c], right.mask[c])
    return out


def block_rows_for(n: int, budget_floats: int = 1 << 25) -> int:
    """Rows per prefilter block so that one block x n score matrix stays within `budget_floats`."""
    return int(max(1, min(n, budget_floats // max(n, 1))))


def prefilter_blocks(
    query: np.ndarray,
    corpus: np.ndarray,
    n_candidates: int,
    *,
    exclude_self: bool = True,
    block_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Iterator[tuple[int, np.ndarray]]:
    """Top-`n_candidates` corpus rows by cosine of pooled vectors, one block of query rows at a time.

    Yields:
        (start, candidates) where candidates is (block, c) int64 of corpus rows, best first
        (ties broken by lower row); c = min(n_candidates, n - exclude_self).
    """
    n = corpus.shape[0]
    c = max(0, min(n_candidates, n - (1 if exclude_self else 0)))
    block_rows = block_rows or block_rows_for(n)
    for start in range(0, query.shape[0], block_rows):
        q = query[start : start + block_rows]
        scores = q @ corpus.T
        if exclude_self:
            idx = np.arange(q.shape[0])
            scores[idx, start + idx] = -np.inf
        if c == 0:
            yield start, np.zeros((q.shape[0], 0), dtype=np.int64)
        else:
            part = np.argpartition(-scores, c - 1, axis=1)[:, :c] if c < n else np.tile(np.arange(n), (q.shape[0], 1))
            part_scores = np.take_along_axis(scores, part, axis=1)
            order = np.lexsort((part, -part_scores), axis=1)
            cand = np.take_along_axis(part, order, axis=1)
            yield start, cand.astype(np.int64)
        if progress is not None:
            progress(q.shape[0])
