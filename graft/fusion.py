"""Rank fusion as pure functions."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

#: RRF constant of Cormack et al. (2009); it damps the head of each list, it is not a cut-off.
RRF_K = 60


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
