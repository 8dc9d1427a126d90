"""Two-stage fusion rerank of retrieved papers for one description.

Stage 1 ranks the candidates three ways — by recency (year, newest first), by citation count
(in-corpus citations, most first) and by vector similarity to the description (cosine with the
paper's mean facet-item vector) — and fuses the three rankings by their average inverse rank,
score(c) = (w/r_year(c) + 1/r_cites(c) + 1/r_sim(c) + v/r_ret(c)) / (w + 2 + v), with the recency
weight w = 1 by default (`SurveyConfig.recency_weight`). r_ret is the candidate's place in the
retrieval list (the graph evidence that found it), weighted v (`SurveyConfig.retrieval_weight`;
0 = the reference method's three rankings). Stage 2 hands the fused list to the backend's reranker
(an LLM, or the offline facet-item reranker), which reorders it; the best `keep` papers are returned.

Before the rerank, `relevant` drops candidates too far from the topic by cosine, except those the
graph expansion tied to several seed papers (`SurveyConfig.tie_support`): a paper many of the
topic's best papers cite or are cited by belongs to its literature whatever its wording.
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
                  recency_weight: float = 1.0, retrieval_weight: float = 0.0) -> np.ndarray:
    """Stage 1: the weighted average inverse rank over recency, citation count, similarity and
    the retrieval order.

    Args:
        candidates: the retrieved papers in retrieval order, best first (year and n_citations are
            read; a missing year ranks last).
        similarity: cosine of each candidate with the description.
        recency_weight: the recency ranking's weight in the average (citations and similarity weigh
            1; 0 leaves recency out).
        retrieval_weight: the retrieval order's weight (0 leaves it out, as the reference method does).
    Returns:
        one score per candidate in (0, 1].
    """
    years = [c.year if c.year is not None else -1 for c in candidates]
    cites = [c.n_citations for c in candidates]
    w, v = float(recency_weight), float(retrieval_weight)
    order = 1.0 / (1.0 + np.arange(len(candidates)))
    return (w * _inverse_ranks(years) + _inverse_ranks(cites) + _inverse_ranks(similarity) + v * order) / (w + 2.0 + v)


def stage_one(candidates: Sequence[Candidate], description_vector: np.ndarray,
              paper_vectors: np.ndarray, row_of: dict[str, int], recency_weight: float = 1.0,
              retrieval_weight: float = 0.0) -> list[Candidate]:
    """Stage 1 on a candidate list (in retrieval order): copies with `similarity` and `score` set,
    best first (ties by the retrieval order)."""
    sims = [float(paper_vectors[row_of[c.paper_id]] @ description_vector) for c in candidates]
    scores = fusion_scores(candidates, sims, recency_weight, retrieval_weight)
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    return [replace(candidates[i], similarity=round(sims[i], 6), score=round(float(scores[i]), 6)) for i in order]


def relevant(candidates: Sequence[Candidate], topic_vector: np.ndarray, paper_vectors: np.ndarray,
             row_of: dict[str, int], floor: float, tie_support: float = 0.0) -> list[Candidate]:
    """The candidates whose cosine with the topic is at least `floor` (order kept): the graph walk
    reaches papers through any shared facet, and a survey keeps only those about its topic.

    A candidate whose citation support from the graph expansion (its `citation` facet term: ties to
    seed papers, summed over the descriptions that found it) is at least `tie_support` is kept
    below the floor too; 0 turns that off."""
    return [c for c in candidates if float(paper_vectors[row_of[c.paper_id]] @ topic_vector) >= floor
            or (tie_support > 0 and c.facets.get("citation", 0.0) >= tie_support)]


def two_stage_rerank(candidates: Sequence[Candidate], description: str, description_vector: np.ndarray,
                     paper_vectors: np.ndarray, row_of: dict[str, int], backend, keep: int,
                     llm_keep: float = 0.75, recency_weight: float = 1.0,
                     retrieval_weight: float = 0.0) -> list[Candidate]:
    """Stage 1 (fusion) then stage 2 (the backend's rerank over the fused list's top share).

    Stage 1 keeps the best `max(keep, llm_keep * len)` papers; stage 2 reorders those and the
    best `keep` are returned.
    """
    first = stage_one(candidates, description_vector, paper_vectors, row_of, recency_weight, retrieval_weight)
    first = first[: max(keep, int(np.ceil(llm_keep * len(first))))]
    by_id = {c.paper_id: c for c in first}
    order = backend.rerank(description, first)
    return [by_id[pid] for pid in order if pid in by_id][:keep]
