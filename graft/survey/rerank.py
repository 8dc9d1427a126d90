"""Two-stage fusion rerank of retrieved papers for one description.

Stage 1 ranks the candidates three ways — by recency (year, newest first), by citation count
(in-corpus citations, most first) and by vector similarity to the description (cosine with the
paper's mean facet-item vector) — and fuses the three rankings by their average inverse rank,
score(c) = (w/r_year(c) + 1/r_cites(c) + 1/r_sim(c)) / (w + 2), with the recency weight w = 1 by
default (`SurveyConfig.recency_weight`). Stage 2 hands the fused list to the
backend's reranker (an LLM, or the offline facet-item reranker), which reorders it; the best
`keep` papers are returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from graft.survey.types import Candidate


def _inverse_ranks(keys: Sequence[float]) -> np.ndarray:
    """1 / rank of each value under a descending sort; ties share the best rank (competition ranking)."""
    values = np.asarray(keys, dtype=np.float64)
    out = np.zeros(len(values))
    for i, v in enumerate(values):
        out[i] = 1.0 / (1 + int((values > v).sum()))
    return out


def fusion_scores(candidates: Sequence[Candidate], similarity: Sequence[float],
                  recency_weight: float = 1.0) -> np.ndarray:
    """Stage 1: the average inverse rank over recency, citation count and similarity.

    Args:
        candidates: the retrieved papers (year and n_citations are read; a missing year ranks last).
        similarity: cosine of each candidate with the description.
        recency_weight: the recency ranking's weight in the average (the other two weigh 1; 0 leaves
            recency out).
    Returns:
        one score per candidate in (0, 1].
    """
    years = [c.year if c.year is not None else -1 for c in candidates]
    cites = [c.n_citations for c in candidates]
    w = float(recency_weight)
    return (w * _inverse_ranks(years) + _inverse_ranks(cites) + _inverse_ranks(similarity)) / (w + 2.0)


def stage_one(candidates: Sequence[Candidate], description_vector: np.ndarray,
              paper_vectors: np.ndarray, row_of: dict[str, int], recency_weight: float = 1.0) -> list[Candidate]:
    """Stage 1 on a candidate list: copies with `similarity` and `score` set, best first (ties by the
    retrieval order)."""
    sims = [float(paper_vectors[row_of[c.paper_id]] @ description_vector) for c in candidates]
    scores = fusion_scores(candidates, sims, recency_weight)
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    return [replace(candidates[i], similarity=round(sims[i], 6), score=round(float(scores[i]), 6)) for i in order]


def relevant(candidates: Sequence[Candidate], topic_vector: np.ndarray, paper_vectors: np.ndarray,
             row_of: dict[str, int], floor: float) -> list[Candidate]:
    """The candidates whose cosine with the topic is at least `floor` (order kept): the graph walk
    reaches papers through any shared facet, and a survey keeps only those about its topic."""
    return [c for c in candidates if float(paper_vectors[row_of[c.paper_id]] @ topic_vector) >= floor]


def two_stage_rerank(candidates: Sequence[Candidate], description: str, description_vector: np.ndarray,
                     paper_vectors: np.ndarray, row_of: dict[str, int], backend, keep: int,
                     llm_keep: float = 0.75, recency_weight: float = 1.0) -> list[Candidate]:
    """Stage 1 (fusion) then stage 2 (the backend's rerank over the fused list's top share).

    Stage 1 keeps the best `max(keep, llm_keep * len)` papers; stage 2 reorders those and the
    best `keep` are returned.
    """
    first = stage_one(candidates, description_vector, paper_vectors, row_of, recency_weight)
    first = first[: max(keep, int(np.ceil(llm_keep * len(first))))]
    by_id = {c.paper_id: c for c in first}
    order = backend.rerank(description, first)
    return [by_id[pid] for pid in order if pid in by_id][:keep]
