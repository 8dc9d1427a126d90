"""Rank fusion as pure functions: plain RRF, graph-weighted RRF, and the support the generative
retriever's fusions weigh candidates with (`support_rows`, `corroboration`)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

#: RRF constant of Cormack et al. (2009); it damps the head of each list, it is not a cut-off.
RRF_K = 60
#: The generative retriever's fusions (`graft.retriever`): graph-weighted RRF, plain RRF, and the
#: graph-RRF candidates walked by the graph teacher.
FUSIONS = ("graph-rrf", "rrf", "graph-walk")


@dataclass
class Fused:
    """One fused candidate: its total score and each run's term (run name -> 1 / (k + rank))."""

    doc: Hashable
    score: float
    terms: dict[str, float] = field(default_factory=dict)


def rrf(runs: Mapping[str, Sequence[Hashable]], k: int = RRF_K) -> list[Fused]:
    """Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009).

    score(d) = sum over runs r containing d of 1 / (k + rank_r(d)), ranks starting at 1.

    Args:
        runs: run name -> ranked documents, best first (a document appears at most once per run).
        k: the RRF constant (60 in the paper). It flattens the contribution of top ranks; it is not
            the number of documents kept.
    Returns:
        Fused documents sorted by (-score, doc) so the order is deterministic; `terms` says which
        runs contributed and how much.
    """
    if k < 0:
        raise ValueError(f"rrf: k must be >= 0, got {k}")
    fused: dict[Hashable, Fused] = {}
    for name, docs in runs.items():
        for rank, doc in enumerate(docs, start=1):
            term = 1.0 / (k + rank)
            entry = fused.setdefault(doc, Fused(doc, 0.0))
            entry.score += term
            entry.terms[name] = entry.terms.get(name, 0.0) + term
    return sorted(fused.values(), key=lambda f: (-f.score, str(f.doc)))


@dataclass
class GraphFused:
    """The result of `graph_rrf`: the kept candidates, best first, and the dropped ones."""

    fused: list[Fused]
    dropped: list[Hashable]  # candidates no facet's edge supports, sorted by str(doc)


def graph_rrf(
    runs: Mapping[str, Sequence[Hashable]],
    support: Mapping[str, Mapping[Hashable, float]],
    k: int = RRF_K,
) -> GraphFused:
    """Graph-weighted reciprocal rank fusion (GRAFT), after RRF (Cormack, Clarke and Buettcher, SIGIR 2009).

    score(c) = sum over runs f containing c of w_f(q, c) / (k + rank_f(c)), ranks starting at 1,
    where w_f(q, c) = support[f].get(c, 0) is the query-candidate edge weight in facet f. A term
    whose edge is absent (w = 0) is zero, and a candidate whose every term is zero is dropped.

    Args:
        runs: facet (run name) -> ranked candidates, best first (each at most once per run).
        support: facet -> candidate -> edge weight w_f(q, c) >= 0; missing means no edge.
        k: the RRF constant (60 in the paper). It flattens the contribution of top ranks; it is not
            the number of candidates kept.
    Returns:
        `GraphFused`: kept candidates sorted by (-score, str(doc)), each with `terms` = the facets
        whose term is non-zero and that term's value (the attribution); and the dropped candidates.
    Raises:
        ValueError: k < 0 or a negative weight.
    """
    if k < 0:
        raise ValueError(f"graph_rrf: k must be >= 0, got {k}")
    fused: dict[Hashable, Fused] = {}
    seen: set[Hashable] = set()
    for name, docs in runs.items():
        weights = support.get(name, {})
        for rank, doc in enumerate(docs, start=1):
            seen.add(doc)
            w = float(weights.get(doc, 0.0))
            if w < 0:
                raise ValueError(f"graph_rrf: negative support {w} for {doc!r} in {name!r}; weights must be >= 0")
            if w == 0.0:
                continue
            term = w / (k + rank)
            entry = fused.setdefault(doc, Fused(doc, 0.0))
            entry.score += term
            entry.terms[name] = entry.terms.get(name, 0.0) + term
    dropped = sorted(seen - set(fused), key=str)
    return GraphFused(sorted(fused.values(), key=lambda f: (-f.score, str(f.doc))), dropped)


def support_rows(support: dict[str, dict[int, float]], n: int) -> dict[str, sp.csr_matrix]:
    """The `graph-walk` fusion's query rows: per facet, a 1 x n row holding each candidate's
    support weight (candidates without support left out).

    Args:
        support: facet -> corpus row -> support weight w_f(q, c) >= 0.
        n: corpus size.
    """
    rows = {}
    for facet, weights in support.items():
        kept = sorted(c for c, w in weights.items() if w > 0)
        rows[facet] = sp.csr_matrix(([float(weights[c]) for c in kept], ([0] * len(kept), kept)),
                                    shape=(1, n), dtype=np.float32)
    return rows


def corroboration(walk: sp.csr_matrix, rows: np.ndarray) -> np.ndarray:
    """Mutual-corroboration support of the candidates `rows` (corpus rows) of one facet list: per
    candidate, its strongest edge in `walk` (the facet's symmetrised graph) to another candidate of
    the list; 0 where none (`graft.retriever`'s module docstring)."""
    rows = np.asarray(rows, dtype=np.int64)
    if not len(rows):
        return np.zeros(0, dtype=np.float64)
    sub = walk[rows][:, rows].toarray()
    np.fill_diagonal(sub, 0.0)
    return sub.max(axis=1)
