"""Two-stage fusion rerank of retrieved papers for one description.

Stage 1 ranks the candidates several ways and fuses the rankings by their weighted average inverse
rank:

- by citation count (in-corpus citations, most first; weight 1);
- by vector similarity to the description (cosine with the paper's mean facet-item vector; weight 1);
- by links into the topic's literature (`Literature.counts`: how many of the papers retrieved for
  the topic it cites or is cited by; weight `SurveyConfig.link_weight`, 2): a paper the topic's
  papers cite, or that cites them, is part of its literature, whatever its wording;
- by recency (year, newest first; weight `SurveyConfig.recency_weight`, 0: a survey cites the
  established work of its field as much as the newest);
- by the retrieval order (weight `SurveyConfig.retrieval_weight`, 0).

score(c) = sum over rankings of weight / rank(c), over the sum of the weights. Stage 2 hands the
fused list to the backend's reranker (an LLM), which reorders its top share; the best `keep`
papers are returned. The offline backend keeps the stage-1 order: its one judgement, similarity,
is already a stage-1 ranking.

Before the rerank, `relevant` drops candidates too far from the topic by cosine, except papers of
the topic's literature with `tie_links` or more links to its on-topic papers (those above the
floor), making at least `tie_share` of all their links (a paper only a section's own retrieval
found must pass the floor): a paper tied to several of the topic's papers belongs to its
literature, while a hub every field cites (a library, an optimiser) has most of its links elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from graft.survey.types import Candidate


def _inverse_ranks(keys: Sequence[float]) -> np.ndarray:
    """1 / rank of each value under a descending sort; ties share the best rank (competition ranking)."""
    values = np.asarray(keys, dtype=np.float64)
    out = np.zeros(len(values))
    for i, v in enumerate(values):
        out[i] = 1.0 / (1 + int((values > v).sum()))
    return out


@dataclass(frozen=True)
class Literature:
    """The topic's literature: the papers retrieved for a topic, as rows of the citation links.

    Args:
        links: symmetric binary citation links of the index (i cites j or j cites i).
        nodes: rows of the papers retrieved for the topic.
    """

    links: sp.csr_matrix
    nodes: np.ndarray
    on_topic: np.ndarray | None = None  # rows of its papers above the topic's cosine floor (None: all)

    @cached_property
    def _masks(self) -> np.ndarray:
        """(2, n) indicators over the index's rows: the literature's papers, its on-topic papers."""
        masks = np.zeros((2, self.links.shape[1]), dtype=np.float64)
        masks[0, np.asarray(self.nodes, dtype=np.int64)] = 1.0
        masks[1, np.asarray(self.nodes if self.on_topic is None else self.on_topic, dtype=np.int64)] = 1.0
        return masks

    def member(self, rows: Sequence[int]) -> np.ndarray:
        """Whether each row is one of the literature's papers."""
        return self._masks[0, np.asarray(rows, dtype=np.int64)] > 0

    def counts(self, rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each row: its links into the literature (itself not counted), into the literature's
        on-topic papers, and all its links."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        sub = self.links[rows]
        inside, on_topic = np.asarray(sub @ self._masks.T).T
        return inside, on_topic, np.asarray(sub.sum(axis=1)).ravel()


def fusion_scores(candidates: Sequence[Candidate], similarity: Sequence[float],
                  recency_weight: float = 0.0, retrieval_weight: float = 0.0,
                  links: Sequence[float] | None = None, link_weight: float = 2.0) -> np.ndarray:
    """Stage 1: the weighted average inverse rank over citation count, similarity, links into the
    topic's literature, recency and the retrieval order.

    Args:
        candidates: the retrieved papers in retrieval order, best first (year and n_citations are
            read; a missing year ranks last).
        similarity: cosine of each candidate with the description.
        recency_weight: the recency ranking's weight (citations and similarity weigh 1; 0 leaves it out).
        retrieval_weight: the retrieval order's weight (0 leaves it out).
        links: each candidate's links into the topic's literature (None leaves the ranking out).
        link_weight: that ranking's weight.
    Returns:
        one score per candidate in (0, 1].
    """
    years = [c.year if c.year is not None else -1 for c in candidates]
    cites = [c.n_citations for c in candidates]
    w, v = float(recency_weight), float(retrieval_weight)
    order = 1.0 / (1.0 + np.arange(len(candidates)))
    total = w * _inverse_ranks(years) + _inverse_ranks(cites) + _inverse_ranks(similarity) + v * order
    weights = w + 2.0 + v
    if links is not None and link_weight > 0:
        total = total + float(link_weight) * _inverse_ranks(links)
        weights += float(link_weight)
    return total / weights


def stage_one(candidates: Sequence[Candidate], description_vector: np.ndarray,
              paper_vectors: np.ndarray, row_of: dict[str, int], recency_weight: float = 0.0,
              retrieval_weight: float = 0.0, links: Sequence[float] | None = None,
              link_weight: float = 2.0) -> list[Candidate]:
    """Stage 1 on a candidate list (in retrieval order): copies with `similarity` and `score` set,
    best first (ties by the retrieval order)."""
    sims = [float(paper_vectors[row_of[c.paper_id]] @ description_vector) for c in candidates]
    scores = fusion_scores(candidates, sims, recency_weight, retrieval_weight, links, link_weight)
    order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    return [replace(candidates[i], similarity=round(sims[i], 6), score=round(float(scores[i]), 6)) for i in order]


def relevant(candidates: Sequence[Candidate], topic_vector: np.ndarray, paper_vectors: np.ndarray,
             row_of: dict[str, int], floor: float, links: Sequence[float] | None = None,
             all_links: Sequence[float] | None = None, tie_links: int = 3,
             tie_share: float = 0.05, tie_floor: float = 0.0) -> list[Candidate]:
    """The candidates whose cosine with the topic is at least `floor` (order kept): the graph walk
    reaches papers through any shared facet, and a survey keeps only those about its topic.

    A candidate with at least `tie_links` links into the topic's literature (`links`), making at
    least `tie_share` of all its links (`all_links`), is kept below the floor too, where its cosine
    reaches `tie_floor` x `floor` (0: whatever its cosine); `tie_links` 0 or no `links` turns that off."""
    out = []
    for i, c in enumerate(candidates):
        cos = float(paper_vectors[row_of[c.paper_id]] @ topic_vector)
        if cos >= floor:
            out.append(c)
        elif links is not None and tie_links > 0 and links[i] >= tie_links and cos >= tie_floor * floor and (
                all_links is None or links[i] >= tie_share * all_links[i]):
            out.append(c)
    return out


def two_stage_rerank(candidates: Sequence[Candidate], description: str, description_vector: np.ndarray,
                     paper_vectors: np.ndarray, row_of: dict[str, int], backend, keep: int,
                     llm_keep: float = 0.75, recency_weight: float = 0.0,
                     retrieval_weight: float = 0.0, links: Sequence[float] | None = None,
                     link_weight: float = 2.0) -> list[Candidate]:
    """Stage 1 (fusion) then stage 2 (the backend's rerank over the fused list's top share).

    Stage 1 keeps the best `max(keep, llm_keep * len)` papers; stage 2 reorders those and the
    best `keep` are returned. `links` is aligned with `candidates`.
    """
    first = stage_one(candidates, description_vector, paper_vectors, row_of, recency_weight, retrieval_weight,
                      links, link_weight)
    first = first[: max(keep, int(np.ceil(llm_keep * len(first))))]
    by_id = {c.paper_id: c for c in first}
    order = backend.rerank(description, first)
    return [by_id[pid] for pid in order if pid in by_id][:keep]
