"""Retrieval for the survey writer: topic descriptions -> facet-attributed corpus papers.

A topic description is not a corpus paper, so it has no row in the facet graphs. `QueryTools`
supplies what turns text into something the index can walk: `rows(record)` gives the record's
facet edge rows, scored exactly as corpus rows are at build time (the graph teacher walks them),
and `facets_of(record)` its facet items (the generative retriever decodes them). Both come from
`graphbuild.external` (`QueryTools.from_scorer`); `graft` itself builds neither, since it imports
no build code.

Retrievers: `teacher` (graph walks, RRF over facets), `graft` (the trained generative retriever,
graph-RRF over facets) and `dense` (cosine over title + abstract embeddings; the baseline).
Several descriptions are fused with RRF, and each paper keeps the facets that surfaced it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from graft.facets import FACETS
from graft.fusion import rrf
from graft.index import Index
from graft.survey.config import SurveyError
from graft.survey.types import Candidate


class TextEncoder:
    """What the survey writer needs of a sentence encoder: `encode(texts) -> (n, d)` unit rows."""

    def encode(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - protocol
        raise NotImplementedError


@dataclass
class QueryTools:
    """Turns text into retrievable queries.

    Attributes:
        encoder: the index's sentence encoder (`encode(texts)` -> unit rows).
        rows: record -> facet edge rows (1 x n each) for the graph teacher; None = teacher unavailable.
        facets_of: record -> facet items for the generative retriever; None = graft unavailable.
    """

    encoder: Any
    rows: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    facets_of: Callable[[dict[str, Any]], dict[str, list[str]]] | None = None

    @classmethod
    def from_scorer(cls, scorer: Any) -> QueryTools:
        """From a `graphbuild.external.ExternalScorer` (its encoder, rows and facet extractor)."""
        return cls(encoder=scorer.encoder, rows=lambda rec: scorer.rows(rec)[0], facets_of=scorer.facets_of)


def topic_record(text: str, query_id: str = "topic") -> dict[str, Any]:
    """A description as a paper-like record (the text is both title and abstract)."""
    return {"id": query_id, "title": text, "abstract": text}


class PaperVectors:
    """Per-paper vectors of an index: the mean of its facet items' embeddings (unit length), and the
    items themselves per facet, for similarity, clustering and evidence search."""

    def __init__(self, index: Index) -> None:
        self.index = index

    @cached_property
    def items(self) -> np.ndarray:
        return np.asarray(self.index.item_embeddings, dtype=np.float32)

    @cached_property
    def item_facet(self) -> np.ndarray:
        return self.index.facets["facet"].to_numpy()

    @cached_property
    def item_text(self) -> list[str]:
        return self.index.facets["text"].to_list()

    @cached_property
    def item_owner(self) -> np.ndarray:
        return self.index.item_rows

    @cached_property
    def papers(self) -> np.ndarray:
        out = np.zeros((self.index.n, self.items.shape[1]), dtype=np.float32)
        np.add.at(out, self.item_owner, self.items)
        norm = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norm, 1e-12)

    @cached_property
    def items_of(self) -> dict[int, dict[str, list[int]]]:
        """node -> facet -> item row numbers."""
        out: dict[int, dict[str, list[int]]] = {}
        for i, (node, facet) in enumerate(zip(self.item_owner.tolist(), self.item_facet.tolist())):
            out.setdefault(node, {f: [] for f in FACETS})[facet].append(i)
        return out

    def facet_items(self, paper_id: str, facet: str | None = None) -> list[int]:
        """Item row numbers of one paper (one facet, or all)."""
        node = self.index.row(paper_id)
        per = self.items_of.get(node, {})
        return per.get(facet, []) if facet else [i for f in FACETS for i in per.get(f, [])]

    def best_item_similarity(self, vector: np.ndarray, paper_ids: Sequence[str],
                             facet: str | None = None) -> np.ndarray:
        """For each paper, the largest cosine between `vector` and one of its (facet) items."""
        out = np.zeros(len(paper_ids), dtype=np.float32)
        for k, pid in enumerate(paper_ids):
            rows = self.facet_items(pid, facet)
            if rows:
                out[k] = float((self.items[rows] @ vector).max())
        return out

    def search_items(self, vector: np.ndarray, facet: str | None, k: int,
                     exclude: set[str] = frozenset()) -> list[tuple[str, int, float]]:
        """The k corpus items (of one facet, or any) nearest to `vector`: (paper_id, item row, cosine),
        one item per paper, best first."""
        mask = np.ones(len(self.item_facet), dtype=bool) if facet is None else self.item_facet == facet
        rows = np.flatnonzero(mask)
        sims = self.items[rows] @ vector
        order = np.lexsort((rows, -sims))
        out: list[tuple[str, int, float]] = []
        seen: set[str] = set()
        for j in order:
            pid = self.index.paper_ids[int(self.item_owner[rows[j]])]
            if pid in seen or pid in exclude:
                continue
            seen.add(pid)
            out.append((pid, int(rows[j]), float(sims[j])))
            if len(out) == k:
                break
        return out


class DenseIndex:
    """Title + abstract embeddings of every corpus paper (the AutoSurvey-like baseline's retrieval).

    Args:
        index: the opened index.
        encoder: sentence encoder; used once to embed the corpus unless `vectors` is given.
        vectors: precomputed (n, d) unit rows aligned with `index.paper_ids` (reused across runs).
    """

    def __init__(self, index: Index, encoder: Any, vectors: np.ndarray | None = None) -> None:
        self.index = index
        if vectors is None:
            p = index.papers
            texts = [f"{t}. {a}" for t, a in zip(p["title"].to_list(), p["abstract"].to_list())]
            vectors = encoder.encode(texts)
        if vectors.shape[0] != index.n:
            raise SurveyError(f"dense vectors have {vectors.shape[0]} rows for an index of {index.n} papers")
        self.vectors = np.asarray(vectors, dtype=np.float32)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        sims = self.vectors @ vector
        order = np.lexsort((np.arange(len(sims)), -sims))[:k]
        return [(int(i), float(sims[i])) for i in order]


class TopicRetriever:
    """Facet-attributed retrieval for free text (topic descriptions, section descriptions).

    Args:
        index: the opened index.
        tools: encoder, edge-row scorer and facet extractor for text queries.
        retriever: "teacher", "graft" (needs INDEX/model) or "dense".
        dense: the dense index ("dense" retriever); built on first use otherwise.
        device: where the generative retriever runs.
    Raises:
        SurveyError: "graft" without a trained model, or a retriever the tools cannot serve.
    """

    def __init__(self, index: Index, tools: QueryTools, retriever: str = "teacher", *,
                 dense: DenseIndex | None = None, device: str = "cpu") -> None:
        from graft.retriever import has_model

        self.index = index
        self.tools = tools
        self.retriever = retriever
        self.device = device
        self.vectors = PaperVectors(index)
        self._dense = dense
        self._memo: dict[tuple[str, int], list[tuple[str, float, dict[str, float]]]] = {}
        if retriever == "graft" and not has_model(index.path):
            raise SurveyError(
                f"--retriever graft needs a trained generative retriever in {index.path / 'model'}; run "
                f"`graft train {index.path}` first, or use --retriever teacher"
            )
        if retriever == "teacher" and tools.rows is None:
            raise SurveyError("the teacher retriever needs QueryTools.rows (graphbuild.external.ExternalScorer)")
        if retriever == "graft" and tools.facets_of is None:
            raise SurveyError("the graft retriever needs QueryTools.facets_of (graphbuild.external.RecordFacets)")

    @property
    def dense(self) -> DenseIndex:
        if self._dense is None:
            self._dense = DenseIndex(self.index, self.tools.encoder)
        return self._dense

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.tools.encoder.encode(list(texts)), dtype=np.float32)

    def _one(self, text: str, k: int, qid: str) -> list[tuple[str, float, dict[str, float]]]:
        if (text, k) not in self._memo:  # the topic is retrieved for expansion and again with the descriptions
            self._memo[(text, k)] = self._retrieve(text, k, qid)
        return self._memo[(text, k)]

    def _retrieve(self, text: str, k: int, qid: str) -> list[tuple[str, float, dict[str, float]]]:
        rec = topic_record(text, qid)
        if self.retriever == "dense":
            vec = self.encode([text])[0]
            return [(self.index.paper_ids[i], s, {"dense": s}) for i, s in self.dense.search(vec, k)]
        if self.retriever == "teacher":
            result = self.index.query_rows(self.tools.rows(rec), query_id=qid, k=k)
        else:
            result = self.index.query(facets=self.tools.facets_of(rec), retriever="graft", fusion="graph-rrf",
                                      k=k, query_id=qid, device=self.device)
        return [(h.paper_id, h.score, dict(h.facets)) for h in result.hits]

    def search(self, descriptions: Sequence[str], k: int) -> list[Candidate]:
        """Retrieve for each description and fuse the lists with RRF (k = 60).

        Returns:
            candidates best first, each with the facets that surfaced it (summed over descriptions)
            and the descriptions that retrieved it; `similarity` = cosine with the first description.
        """
        runs: dict[str, list[str]] = {}
        facets: dict[str, dict[str, float]] = {}
        found_by: dict[str, list[int]] = {}
        for d, text in enumerate(descriptions):
            hits = self._one(text, k, f"d{d}")
            runs[f"d{d}"] = [pid for pid, _, _ in hits]
            for pid, _, terms in hits:
                acc = facets.setdefault(pid, {})
                for f, v in terms.items():
                    acc[f] = acc.get(f, 0.0) + float(v)
                found_by.setdefault(pid, []).append(d)
        fused = rrf(runs)
        papers = self.index.papers
        cites = papers["n_citations"].to_list() if "n_citations" in papers.columns else [0] * self.index.n
        years = papers["year"].to_list()
        titles = papers["title"].to_list()
        topic_vec = self.encode([descriptions[0]])[0] if descriptions else None
        out = []
        for f in fused:
            pid = str(f.doc)
            node = self.index.row(pid)
            sim = float(self.vectors.papers[node] @ topic_vec) if topic_vec is not None else 0.0
            out.append(Candidate(paper_id=pid, title=titles[node], year=years[node], n_citations=int(cites[node] or 0),
                                 score=f.score, facets={k: round(v, 6) for k, v in facets[pid].items()},
                                 descriptions=found_by[pid], similarity=sim))
        return out
