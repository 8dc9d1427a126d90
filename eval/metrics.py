"""Evaluation metrics over TREC runs and qrels.

- **Recall@k**: |top-k ∩ gold| / |gold| per query, averaged over the queries of the qrels (a query
  missing from the run scores 0).
- **Facet-attribution precision**: among the (query, result, facet) credits of a system's top-k
  results, the share whose facet graph holds an edge between query and result (per facet and
  overall, micro-averaged over credits).
- **Non-obvious share**: among correct retrievals at k (top-k hits that are in the gold), the share
  that lie outside the query's `m` = 50 nearest papers by *facet similarity*, defined as
  sim(q, c) = mean over the four facets of the maximum cosine between an item of q and an item of
  c in that facet (items are the index's L2-normalised facet-item embeddings; a facet where either
  paper has no item contributes 0). Micro-averaged over correct retrievals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from graft.facets import FACETS

#: Cut-offs reported by every retrieval table.
KS = (20, 50)
#: Nearest neighbours by facet similarity that count as "obvious" results.
OBVIOUS_M = 50


def recall_at(ranked: Sequence[str], gold: set[str], k: int) -> float:
    """|ranked[:k] ∩ gold| / |gold| (0 for an empty gold set)."""
    if not gold:
        return 0.0
    return len(set(ranked[:k]) & gold) / len(gold)


def mean_recall(run: Mapping[str, Sequence[tuple[str, float]]], qrels: Mapping[str, set[str]], k: int,
                qids: Iterable[str] | None = None) -> float:
    """Recall@k averaged over `qids` (default: every query of the qrels with a non-empty gold)."""
    qids = [q for q in (qids if qids is not None else sorted(qrels)) if qrels.get(q)]
    if not qids:
        return 0.0
    return float(np.mean([recall_at([d for d, _ in run.get(q, [])], qrels[q], k) for q in qids]))


def attribution_precision(credits: Iterable[tuple[str, bool]]) -> dict[str, object]:
    """Precision of facet credits.

    Args:
        credits: one (facet, supported) pair per credited facet of a retrieved result.
    Returns:
        {"overall": precision or None, "credited": n, "supported": n,
         "per_facet": {facet: {"precision", "credited", "supported"}}}; precision is None where
        nothing was credited.
    """
    counts = {f: [0, 0] for f in FACETS}
    for facet, ok in credits:
        c = counts.setdefault(facet, [0, 0])
        c[0] += 1
        c[1] += int(bool(ok))
    total = sum(c[0] for c in counts.values())
    good = sum(c[1] for c in counts.values())
    return {
        "overall": good / total if total else None,
        "credited": total,
        "supported": good,
        "per_facet": {f: {"precision": c[1] / c[0] if c[0] else None, "credited": c[0], "supported": c[1]}
                      for f, c in counts.items()},
    }


def non_obvious_share(run: Mapping[str, Sequence[tuple[str, float]]], qrels: Mapping[str, set[str]],
                      obvious: Mapping[str, set[str]], k: int = 20) -> dict[str, object]:
    """Share of correct top-k retrievals outside each query's obvious set.

    Args:
        run: qid -> ranked (docid, score).
        qrels: qid -> gold docids.
        obvious: qid -> the query's `OBVIOUS_M` nearest papers by facet similarity.
        k: cut-off.
    Returns:
        {"share": share or None, "correct": n, "non_obvious": n}, over queries present in `obvious`.
    """
    correct = non_obvious = 0
    for qid, near in obvious.items():
        gold = qrels.get(qid, set())
        for docid, _ in list(run.get(qid, []))[:k]:
            if docid in gold:
                correct += 1
                non_obvious += docid not in near
    return {"share": non_obvious / correct if correct else None, "correct": correct, "non_obvious": non_obvious}


class FacetSimilarity:
    """sim(q, c) = mean over facets of the max item-item cosine (module docstring), against every
    paper of an index at once.

    Args:
        owner: paper row of each facet item; facet_of_item: its facet; vectors: its unit embedding.
        n: number of papers.
    """

    def __init__(self, owner: np.ndarray, facet_of_item: np.ndarray, vectors: np.ndarray, n: int) -> None:
        self.n = n
        self.by_facet = {}
        for f in FACETS:
            sel = facet_of_item == f
            self.by_facet[f] = (np.asarray(owner[sel], dtype=np.int64), np.asarray(vectors[sel], dtype=np.float32))

    def scores(self, query_items: Mapping[str, np.ndarray]) -> np.ndarray:
        """Similarity of a query, given its item vectors per facet (m_f x d), to every paper."""
        total = np.zeros(self.n, dtype=np.float64)
        for f in FACETS:
            q = np.asarray(query_items.get(f, np.zeros((0, 1))), dtype=np.float32)
            owner, vecs = self.by_facet[f]
            if len(q) == 0 or len(vecs) == 0:
                continue
            item_best = (vecs @ q.T).max(axis=1)
            best = np.full(self.n, -np.inf)
            np.maximum.at(best, owner, item_best)
            best[~np.isfinite(best)] = 0.0
            total += best
        return total / len(FACETS)

    def nearest(self, query_items: Mapping[str, np.ndarray], m: int = OBVIOUS_M,
                exclude: Iterable[int] = ()) -> list[int]:
        """The m most similar papers (ties by row), excluding `exclude` (e.g. the query itself)."""
        s = self.scores(query_items)
        for i in exclude:
            s[i] = -np.inf
        order = np.lexsort((np.arange(self.n), -s))
        return [int(i) for i in order[:m] if np.isfinite(s[i])]
