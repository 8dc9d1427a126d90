"""Fusion of a decoder's per-facet candidate lists into a facet-attributed result.

`CandidateFusion` is the model-free half of the generative retriever (`graft.retriever`): given each
facet's candidates (paper id -> decoder score), it fuses them by graph-RRF, plain RRF or graph-walk
(`graft.fusion.FUSIONS`), with the citation channel (and, for a query outside the corpus given
with its text, the text channel), and returns the ranked hits with their
evidence. It needs the index's sparse graphs and citation links only (no model, no torch), so a
stand-in decoder's lists can be fused exactly as the trained model's are
(`experiments/citation_channel.py`, `experiments/ooc_fusion_proxy.py`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graft.errors import GraftError
from graft.fusion import (
    CHANNELS,
    CITATION,
    CITATION_DEPTH,
    CITATION_FIRST,
    CITATION_WEIGHT,
    FUSIONS,
    RRF_K,
    TEXT,
    TEXT_WEIGHT,
    add_citation_run,
    corroboration,
    graph_rrf,
    keep_first,
    linked_first,
    ranked,
    rrf,
    support_rows,
    text_run,
)
from graft.results import CitationEvidence, Evidence, Hit, QueryResult, TextEvidence
from graft.teacher import TeacherConfig

if TYPE_CHECKING:
    from graft.index import Index


class CandidateFusion:
    """Fuses per-facet candidate lists over an index's graph (see `graft.retriever`'s docstring for
    the support each fusion weighs candidates with).

    Args:
        index: the opened index.
    """

    def __init__(self, index: Index) -> None:
        self.index = index

    @cached_property
    def walk(self) -> dict[str, sp.csr_matrix]:
        """max(W_f, W_f^T) per facet, as the teacher walks the graph (`Index.walk_graphs`)."""
        return self.index.walk_graphs

    def fuse_paper(self, paper_id: str, lists: dict[str, dict[str, float]], *, k: int = 20,
                   fusion: str = "graph-rrf", rrf_k: int = RRF_K,
                   citation_weight: float = CITATION_WEIGHT, **channel: int) -> QueryResult:
        """Fuse a corpus paper's facet lists (paper id -> decoder score per facet, as
        `GenerativeRetriever.facet_lists` gives them); graph-RRF support = the query's edges.

        Raises:
            GraftError: unknown paper id or fusion.
        """
        q = self.index.row(paper_id)

        def support(facet: str, cands: list[int]) -> dict[int, float]:
            row = self.walk[facet][q]
            weights = dict(zip(row.indices.tolist(), row.data.tolist()))
            return {c: float(weights.get(c, 0.0)) for c in cands}

        return self._fuse(paper_id, lists, support, k, fusion, rrf_k, citation_weight, exclude={q}, **channel)

    def fuse_items(self, query_id: str, lists: dict[str, dict[str, float]], *, k: int = 20,
                   fusion: str = "graph-rrf", rrf_k: int = RRF_K, citation_weight: float = CITATION_WEIGHT,
                   exclude: set[str] | None = None, neighbours: dict[str, float] | None = None,
                   text_weight: float = TEXT_WEIGHT, **channel: int) -> QueryResult:
        """Fuse the facet lists of a paper outside the corpus; graph-RRF support by mutual
        corroboration among the candidates (`graft.retriever`'s docstring). `exclude`: paper ids
        never returned (left out of the lists and of the channels).

        Args:
            neighbours: the query's nearest corpus papers by title + abstract (paper id -> cosine,
                `graft.external.text_coupling_row`), for the text channel at W_t =
                `text_weight` (`graft.fusion.TEXT`); None or empty = no text channel. In graph-walk
                they join every facet row at beta x cosine instead, as text coupling joins the
                teacher's rows.
        Raises:
            GraftError: unknown fusion, a negative weight.
        """
        def support(facet: str, cands: list[int]) -> dict[int, float]:
            return dict(zip(cands, corroboration(self.walk[facet], np.asarray(cands, dtype=np.int64)).tolist()))

        if text_weight < 0:
            raise GraftError(f"text_weight must be >= 0, got {text_weight}")
        rows = {self.index.row_of[p] for p in exclude or () if p in self.index.row_of}
        text = text_run({self.index.row_of[p]: c for p, c in (neighbours or {}).items() if p in self.index.row_of},
                        exclude=rows) if text_weight > 0 else []
        return self._fuse(query_id, lists, support, k, fusion, rrf_k, citation_weight, exclude=rows,
                          text=text, text_weight=text_weight, **channel)

    # ---- internals -------------------------------------------------------------------------
    def _fuse(self, query_id: str, lists: dict[str, dict[str, float]], support: Any, k: int, fusion: str,
              rrf_k: int, citation_weight: float, exclude: set[int] | None = None,
              text: list[tuple[int, float]] | None = None, text_weight: float = TEXT_WEIGHT, *,
              citation_first: int = CITATION_FIRST, citation_depth: int = CITATION_DEPTH,
              citation_keep: int = 0) -> QueryResult:
        """Fuse facet lists (paper id -> score) as `fusion`, with the text channel's run `text`
        ((row, cosine), best first) at W_t = `text_weight` and then the citation channel at W =
        `citation_weight` (off for an index without citation links), made from the first
        `citation_first` results, `citation_depth` papers long, never pushing the facet fusion's
        first `citation_keep` results down (`graft.fusion.keep_first`); `support(facet, rows)` gives
        graph-RRF's weights. Runs are fused as corpus rows."""
        if fusion not in FUSIONS:
            raise GraftError(f"unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}")
        if citation_weight < 0:
            raise GraftError(f"citation_weight must be >= 0, got {citation_weight}")
        links = self.index.citation_links
        citation_weight = self.index.channel_weight(citation_weight)
        row_of, ids = self.index.row_of, self.index.paper_ids
        skip = exclude or set()
        runs = {f: [row_of[c] for c in ranked(s) if row_of[c] not in skip] for f, s in lists.items()}
        weights = {f: support(f, r) for f, r in runs.items()}
        info: dict[str, Any] = {"candidates": {f: len(r) for f, r in runs.items()}, "citation_weight": citation_weight}
        text = text or []
        if text:
            info["text_neighbours"], info["text_weight"] = len(text), text_weight
        if fusion == "graph-walk":
            beta = self.index.build_setting("beta", 0.25)
            for r, cos in text:  # text coupling, as in the teacher's rows of a text-only paper
                for f in weights:
                    weights[f][r] = weights[f].get(r, 0.0) + beta * cos
            rows = support_rows(weights, self.index.n)
            info["seeds"] = {f: int(r.nnz) for f, r in rows.items()}
            walked = self.index.query_rows(rows, query_id=query_id, k=k, exclude=exclude,
                                           config=TeacherConfig(rrf_k=rrf_k, citation_weight=citation_weight,
                                                                citation_first=citation_first,
                                                                citation_depth=citation_depth,
                                                                citation_keep=citation_keep))
            return QueryResult(query_id, "graft", fusion, walked.hits, info)

        if text:
            runs[TEXT] = [r for r, _ in text]
            weights[TEXT] = {r: text_weight * cos for r, cos in text}
        cosine = dict(text)

        def fuse() -> list[Any]:
            if fusion == "rrf":
                return rrf(runs, k=rrf_k, weights={CITATION: citation_weight, TEXT: text_weight}, tie=ids.__getitem__)
            out = graph_rrf(runs, weights, k=rrf_k, tie=ids.__getitem__)
            info["dropped"] = len(out.dropped)
            info["dropped_ids"] = sorted(ids[d] for d in out.dropped)
            return out.fused

        fused = fuse()
        first: list[int] = []
        if citation_weight > 0:
            facet_fused = fused
            runs, support_out, first = add_citation_run(
                runs, fused, links, citation_weight, exclude=exclude or (), first=citation_first,
                depth=citation_depth, support=weights if fusion == "graph-rrf" else None)
            if support_out is not None:
                weights = support_out
            fused = keep_first(facet_fused, fuse(), citation_keep)
        cited = [int(e.doc) for e in fused[:k] if CITATION in e.terms]
        linked = dict(zip(cited, linked_first(links, first, cited)))
        titles, years = self.index.paper_column("title"), self.index.paper_column("year")
        hits = []
        for rank, entry in enumerate(fused[:k], start=1):
            node = int(entry.doc)
            evidence = {f: Evidence(weight=round(weights[f].get(node, 0.0), 6), hops=1,
                                    rank=runs[f].index(node) + 1) for f in entry.terms if f not in CHANNELS}
            citation = None
            if CITATION in entry.terms:
                papers = [ids[p] for p in linked[node]]
                citation = CitationEvidence(term=entry.terms[CITATION], share=round(len(papers) / len(first), 6),
                                            papers=papers, first=len(first), rank=runs[CITATION].index(node) + 1)
            reads = None
            if TEXT in entry.terms:
                reads = TextEvidence(term=entry.terms[TEXT], cosine=round(cosine[node], 6),
                                     rank=runs[TEXT].index(node) + 1)
            hits.append(Hit(paper_id=ids[node], title=titles[node], rank=rank, score=entry.score,
                            facets={f: t for f, t in entry.terms.items() if f not in CHANNELS},
                            evidence=evidence, year=years[node], citation=citation, text=reads))
        return QueryResult(query_id, "graft", fusion, hits, info)
