"""Retrieval for the survey writer: topic descriptions -> facet-attributed corpus papers.

A topic description is not a corpus paper, so it has no row in the facet graphs: it is asked as a
paper outside the corpus through the query front door (`graft.query.Searcher`), which scores its
facet edge rows exactly as corpus rows are at build time (the graph teacher walks them) and
extracts its facet items (the generative retriever decodes them). `QueryTools` holds the encoder
and the text coupling and feedback settings the searcher uses.

Retrievers: `teacher` (graph walks, RRF over facets), `graft` (the trained generative retriever,
graph-RRF over facets) and `dense` (cosine over title + abstract embeddings; the baseline).
Several descriptions are fused with RRF, and each paper keeps the facets that surfaced it.

The graph retrievers' lists are widened through the corpus graph (`graph_expansion`): the best
`seeds` papers of a text query are corpus papers with citation and facet edges, and a topic's
literature is the papers tied to many of them. On cs768's 30 survey hold-outs (title-only
queries) this raised the share of a hold-out's bibliography among the first 40 teacher papers
from 0.109 to 0.181.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import scipy.sparse as sp

from graft.facets import FACETS
from graft.fusion import rrf
from graft.index import Index
from graft.query import QueryConfig, Searcher
from graft.survey.config import SurveyError
from graft.survey.types import Candidate
from graft.text import paper_texts


def papers_until(index: Index, year: int | None) -> np.ndarray | None:
    """Mask of the papers a survey "as of" `year` may cite: published that year or before, or
    undated; None when there is no cut-off."""
    if year is None:
        return None
    return np.array([y is None or int(y) <= year for y in index.papers["year"].to_list()], dtype=bool)


def graph_expansion(first: Sequence[int], links: sp.csr_matrix, coupling: sp.csr_matrix,
                    facet_walk: dict[str, sp.csr_matrix], similarity: np.ndarray, *, seeds: int, k: int,
                    allowed: np.ndarray | None = None) -> list[tuple[int, float, dict[str, float]]]:
    """Papers tied to a text query's best corpus papers through the citation graph.

    The first `seeds` nodes of `first` are the seeds S. Every paper c with citation support
    support(c) = sum over s in S of (links[s, c] + coupling[s, c]) > 0 is scored
    support(c) + similarity[c], the seeds themselves included (a seed with no tie to the others
    has no support and drops out here; callers append the first list after this one).

    Args:
        first: nodes of the first retrieval, best first.
        links: symmetric binary citation links (i cites j or j cites i).
        coupling: the citation score matrix (bibliographic coupling + co-citation, in [0, 1]).
        facet_walk: symmetric facet edge matrices, read for the attribution only.
        similarity: cosine of every paper with the query text (breaks ties between equal support).
        seeds: how many of `first` seed the expansion.
        k: papers returned at most.
        allowed: boolean mask of papers that may be returned (None = all).
    Returns:
        (node, score, attribution) best first; the attribution holds "citation" = support(c) and,
        per facet with an edge between c and a seed, the summed edge weights.
    """
    s = np.asarray(list(first)[:seeds], dtype=np.int64)
    n = links.shape[0]
    if len(s) == 0 or k < 1:
        return []
    w = np.zeros(n, dtype=np.float32)
    w[s] = 1.0
    support = np.asarray(links.T @ w + coupling.T @ w, dtype=np.float64).ravel()
    ok = support > 0
    if allowed is not None:
        ok &= allowed
    nodes = np.flatnonzero(ok)
    score = support[nodes] + np.asarray(similarity, dtype=np.float64)[nodes]
    nodes = nodes[np.lexsort((nodes, -score))][:k]
    per_facet = {f: np.asarray(m[s][:, nodes].sum(axis=0)).ravel() for f, m in facet_walk.items()}
    out = []
    for j, node in enumerate(nodes.tolist()):
        terms = {"citation": round(float(support[node]), 6)}
        terms.update({f: round(float(v[j]), 6) for f, v in per_facet.items() if v[j] > 0})
        out.append((node, float(support[node] + similarity[node]), terms))
    return out


class TextEncoder:
    """What the survey writer needs of a sentence encoder: `encode(texts) -> (n, d)` unit rows."""

    def encode(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - protocol
        raise NotImplementedError


@dataclass
class QueryTools:
    """What the survey writer asks text queries with, besides the index: the index's sentence
    encoder and the settings of the query front door (`graft.query.Searcher`) for topic texts.

    Attributes:
        encoder: the index's sentence encoder (`encode(texts)` -> unit rows).
        text_neighbours: M of the teacher's text coupling for topic texts (`QueryConfig.text_neighbours`).
        feedback: R of the teacher's feedback pass for topic texts (`QueryConfig.feedback`).
    """

    encoder: Any
    text_neighbours: int = 10
    feedback: int = 3

    def check(self, config: Any, index: Index | None = None) -> None:
        """Refuse tools whose settings differ from `config`'s (the survey would not be the one its
        recorded settings describe); an index without title + abstract vectors has no text
        coupling, whatever was asked.

        Raises:
            SurveyError: naming both settings and how to make matching tools.
        """
        have = {"text_neighbours": self.text_neighbours, "feedback": self.feedback}
        if index is not None and index.paper_embeddings is None:
            del have["text_neighbours"]
        want = {"text_neighbours": config.text_neighbours, "feedback": config.feedback}
        wrong = {k: v for k, v in have.items() if v != want[k]}
        if wrong:
            raise SurveyError(
                "the query tools make edge rows with " + ", ".join(f"{k}={v}" for k, v in wrong.items())
                + " but the SurveyConfig says " + ", ".join(f"{k}={want[k]}" for k in wrong)
                + "; make them with QueryTools(encoder, text_neighbours=config.text_neighbours, "
                "feedback=config.feedback) (or cli.survey_cmd.survey_tools)")


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
        # the item texts alone: the writer compares sentences (topics, claims) with items, not papers
        return np.asarray(self.index.item_text_embeddings, dtype=np.float32)

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

    def search_items(self, vector: np.ndarray, facet: str | None, k: int, exclude: set[str] = frozenset(),
                     allowed: np.ndarray | None = None) -> list[tuple[str, int, float]]:
        """The k corpus items (of one facet, or any) nearest to `vector`: (paper_id, item row, cosine),
        one item per paper, best first; `allowed` masks papers (by node) that may be returned."""
        mask = np.ones(len(self.item_facet), dtype=bool) if facet is None else self.item_facet == facet
        if allowed is not None:
            mask &= allowed[self.item_owner]
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
        encoder: sentence encoder; embeds the corpus once when neither `vectors` nor the index's
            `embeddings/papers.npy` (written by the build) is there.
        vectors: precomputed (n, d) unit rows aligned with `index.paper_ids` (reused across runs).
    """

    def __init__(self, index: Index, encoder: Any, vectors: np.ndarray | None = None) -> None:
        self.index = index
        if vectors is None:
            vectors = index.paper_embeddings
        if vectors is None:
            vectors = encoder.encode(paper_texts(index.papers))
        if vectors.shape[0] != index.n:
            raise SurveyError(f"dense vectors have {vectors.shape[0]} rows for an index of {index.n} papers")
        self.vectors = np.asarray(vectors, dtype=np.float32)

    def search(self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[tuple[int, float]]:
        """The k papers nearest to `vector` (row, cosine), best first; only `allowed` rows when given."""
        sims = self.vectors @ vector
        rows = np.arange(len(sims)) if allowed is None else np.flatnonzero(allowed)
        order = np.lexsort((rows, -sims[rows]))[:k]
        return [(int(rows[i]), float(sims[rows[i]])) for i in order]


class TopicRetriever:
    """Facet-attributed retrieval for free text (topic descriptions, section descriptions).

    Args:
        index: the opened index.
        tools: encoder, edge-row scorer and facet extractor for text queries.
        retriever: "teacher", "graft" (needs INDEX/model) or "dense".
        dense: the dense index ("dense" retriever); built on first use otherwise.
        device: where the generative retriever runs.
        vectors: the index's `PaperVectors` to share (built here when None).
    Raises:
        SurveyError: "graft" without a trained model, or a retriever the tools cannot serve.
    """

    def __init__(self, index: Index, tools: QueryTools, retriever: str = "teacher", *,
                 dense: DenseIndex | None = None, device: str = "cpu", seeds: int = 0,
                 until_year: int | None = None, citation_weight: float = 0.0,
                 vectors: PaperVectors | None = None) -> None:
        from graft.manifest import has_model

        self.index = index
        self.tools = tools
        self.retriever = retriever
        self.device = device
        self.seeds = seeds
        self.until_year = until_year
        self.vectors = vectors if vectors is not None else PaperVectors(index)
        self._dense = dense
        self._memo: dict[tuple[str, int], list[tuple[str, float, dict[str, float]]]] = {}
        if retriever == "graft" and not has_model(index.path):
            raise SurveyError(
                f"--retriever graft needs a trained generative retriever in {index.path / 'model'}; run "
                f"`graft train {index.path}` first, or use --retriever teacher"
            )
        self.searcher: Searcher | None = None
        if retriever != "dense":
            # the topic's rows and facets as `graft query --text` makes them, the citation channel
            # at W (`SurveyConfig.citation_weight`; off without citation links), no text channel
            # and nothing kept first: the writer fuses several descriptions' lists itself
            self.searcher = Searcher(index, QueryConfig(
                retriever=retriever, k=20, citation_weight=float(citation_weight), citation_keep=0,
                text_neighbours=tools.text_neighbours, feedback=tools.feedback, text_weight=0.0,
                device=device if retriever == "graft" else "cpu"),  # the teacher decodes nothing
                encoder=tools.encoder)
        #: the fusion's citation channel (the graph teacher's settings of the searcher)
        self.teacher_config = (self.searcher.config if self.searcher is not None
                               else QueryConfig(citation_weight=float(citation_weight))).teacher_config(index)
        self._searchers: dict[int, Searcher] = {}

    def _with_k(self, k: int) -> Searcher:
        """The searcher asking for `k` results."""
        assert self.searcher is not None
        if k not in self._searchers:
            self._searchers[k] = self.searcher.with_config(k=k)
        return self._searchers[k]

    @cached_property
    def allowed(self) -> np.ndarray | None:
        return papers_until(self.index, self.until_year)

    @cached_property
    def disallowed(self) -> set[int] | None:
        """Rows the teacher leaves out of its facet lists (papers after until_year)."""
        return None if self.allowed is None else set(np.flatnonzero(~self.allowed).tolist())

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
        allowed = self.allowed
        fetch = k if allowed is None else 3 * k  # room for the papers after until_year
        if self.retriever == "dense":
            vec = self.encode([text])[0]
            hits = [(i, s, {"dense": s}) for i, s in self.dense.search(vec, k, allowed)]
        elif self.retriever == "teacher":
            # rank over the whole corpus and drop later papers; if that leaves fewer than k, rank
            # again with the later papers left out of the facet lists, so the list comes out full
            rows = self.searcher.scorer.rows(rec)[0]
            hits = self._allowed_hits(self._with_k(fetch).rows(rows, query_id=qid), k)
            if allowed is not None and len(hits) < k:
                hits = self._allowed_hits(self._with_k(k).rows(rows, query_id=qid, exclude=self.disallowed), k)
        else:  # constrained decoding reaches every DocID: over-fetch, then drop papers after until_year
            facets = self.searcher.record_facets(rec)
            hits = self._allowed_hits(self._with_k(fetch).items(facets, query_id=qid), k)
        if self.seeds and self.retriever != "dense" and hits:
            hits = self._grow(hits, text, k)
        return [(self.index.paper_ids[node], score, terms) for node, score, terms in hits]

    def _allowed_hits(self, result: Any, k: int) -> list[tuple[int, float, dict[str, float]]]:
        """A query result's hits as (row, score, facet terms), papers after until_year dropped, at most k."""
        allowed = self.allowed
        hits = [(self.index.row(h.paper_id), h.score, dict(h.facets)) for h in result.hits]
        return [h for h in hits if allowed is None or allowed[h[0]]][:k]

    def _grow(self, hits: list[tuple[int, float, dict[str, float]]], text: str,
              k: int) -> list[tuple[int, float, dict[str, float]]]:
        """`graph_expansion` from the first hits, then the first hits it did not reach, k in all;
        a paper in both lists keeps the facet terms of both."""
        sim = self.vectors.papers @ self.encode([text])[0]
        grown = graph_expansion([node for node, _, _ in hits], self.index.citation_links, self.index.citation_score,
                                self.index.teacher().walk, sim, seeds=self.seeds, k=k, allowed=self.allowed)
        first = {node: terms for node, _, terms in hits}
        out = [(node, score, {**terms, **first.get(node, {})}) for node, score, terms in grown]
        reached = {node for node, _, _ in grown}
        out += [h for h in hits if h[0] not in reached]
        return out[:k]

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


def fuse_with_pool(found: Sequence[Candidate], pool: Sequence[Candidate], vector: np.ndarray,
                   paper_vectors: np.ndarray, row_of: dict[str, int]) -> list[Candidate]:
    """A section's candidates: its own retrieval fused by RRF with its share of the survey's pool
    ranked by cosine with the section description, so a section writes about the papers the topic
    retrieval ranked as well as about its own finds. A paper in both keeps the facet terms of both.

    Args:
        found: the section description's retrieval, best first.
        pool: the section's share of the survey's reranked pool.
        vector: the section description's embedding.
        paper_vectors: (n, d) unit paper vectors; row_of: paper id -> row.
    Returns:
        candidates best first (copies; `score` = the RRF score).
    """
    ranked = sorted(pool, key=lambda c: (-float(paper_vectors[row_of[c.paper_id]] @ vector), c.paper_id))
    fused = rrf({"section": [c.paper_id for c in found], "pool": [c.paper_id for c in ranked]})
    first = {c.paper_id: c for c in found}
    second = {c.paper_id: c for c in pool}
    out = []
    for f in fused:
        pid = str(f.doc)
        a, b = first.get(pid), second.get(pid)
        base = a or b
        facets = {**(b.facets if b else {}), **(a.facets if a else {})}
        out.append(replace(base, score=round(f.score, 6), facets=facets))
    return out
