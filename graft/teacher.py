"""The graph teacher: two-hop walks over each facet graph, one ranked list per facet, fused by RRF.

For a query row r (the query's out-edge weights in facet f):
    score_f(c) = r[c] + gamma * (r @ W_f)[c] / sum(r)
i.e. the one-hop edge weight plus the weight-averaged two-hop weight through the query's
neighbours. The per-facet lists are fused with reciprocal rank fusion (k = 60).

With `citation_weight` W > 0 and the corpus's citation links, a fifth run joins the fusion: the
papers that cite or are cited by the first R results of the facet fusion (`graft.fusion.cited_with`),
weighted W; the first `citation_keep` results of the facet fusion stay first (`graft.fusion.keep_first`).
Its hits carry citation evidence, never a facet credit. The design's teacher (the
distillation teacher, the `teacher` system of the evaluation) has W = 0.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.config import config_from_dict, type_problems
from graft.errors import ConfigError
from graft.facets import FACETS
from graft.fusion import (
    CITATION,
    CITATION_DEPTH,
    CITATION_FIRST,
    RRF_K,
    cited_with,
    keep_first,
    linked_first,
    rrf,
)


def symmetrise(graphs: dict[str, sp.csr_matrix]) -> dict[str, sp.csr_matrix]:
    """max(W_f, W_fᵀ) per facet: an edge either way relates two papers (the top-K cut is one-sided)."""
    out = {}
    for facet, g in graphs.items():
        g = sp.csr_matrix(g, dtype=np.float32)
        out[facet] = g.maximum(g.T).tocsr()
    return out


@dataclass(frozen=True)
class TeacherConfig:
    two_hop_weight: float = 0.5  # gamma: weight of propagated two-hop scores next to one-hop weights
    symmetric: bool = True  # walk in-edges too: "related" is symmetric, out-edges are a top-K cut
    depth: int = 100  # candidates kept per facet list before fusion
    rrf_k: int = RRF_K  # RRF constant (Cormack et al. 2009)
    citation_weight: float = 0.0  # W of the citation channel (0 = off; `graft.fusion.CITATION_WEIGHT`)
    citation_first: int = CITATION_FIRST  # R: first results whose citation links make the channel
    citation_depth: int = CITATION_DEPTH  # papers kept in the channel's run
    citation_keep: int = 0  # first results of the facet fusion the channel never pushes down (`keep_first`)

    def __post_init__(self) -> None:
        problems = type_problems(self)
        if problems:
            raise ConfigError("TeacherConfig: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict) -> TeacherConfig:
        return config_from_dict(cls, data)


@dataclass
class FacetCandidate:
    node: int
    score: float
    weight: float  # one-hop edge weight, or the strongest two-hop path's weight product
    hops: int
    via: int | None
    rank: int = 0  # 1-based position in its facet's list
    linked: tuple[int, ...] = ()  # citation channel: the first results it cites or is cited by
    of: int = 0  # citation channel: how many first results the run was made from


class GraphTeacher:
    """Graph teacher over the per-facet top-K matrices.

    Args:
        graphs: facet -> n x n top-K edge weights.
        config: walk and fusion settings.
        links: n x n symmetric 0/1 citation links, needed by the citation channel (config W > 0).
        ids: the paper id of each row; equal scores, in a facet's list and in the fusion, are then
            ordered by paper id, as in TREC run files (without it, by row, and the fusion by `str(row)`).
        walked: `graphs` are already the walk matrices (symmetrised where `config.symmetric`:
            `graft.Index.walk_graphs`), taken as they are.
    Raises:
        ValueError: W > 0 without `links`, W < 0, or `ids` not one per row.
    """

    def __init__(self, graphs: dict[str, sp.csr_matrix], config: TeacherConfig | None = None,
                 links: sp.csr_matrix | None = None, ids: Sequence[str] | None = None, *,
                 walked: bool = False) -> None:
        self.config = config or TeacherConfig()
        self.tie: Callable[[Hashable], Any] = str
        if self.config.citation_weight < 0:
            raise ConfigError(f"citation_weight must be >= 0, got {self.config.citation_weight}")
        if self.config.citation_weight > 0 and links is None:
            raise ConfigError("the citation channel (citation_weight > 0) needs the citation links")
        self.links = links
        self.walk: dict[str, sp.csr_matrix] = (
            dict(graphs) if walked
            else symmetrise(graphs) if self.config.symmetric
            else {f: sp.csr_matrix(g, dtype=np.float32) for f, g in graphs.items()}
        )
        self.n = next(iter(self.walk.values())).shape[0] if self.walk else 0
        # Among equal scores, rows fall by paper id (by row without ids), in each facet's list and in
        # the fusion, as in a TREC run file.
        self.tie_rank = np.arange(self.n, dtype=np.int64)
        if ids is not None:
            if len(ids) != self.n:
                raise ConfigError(f"ids: {len(ids)} paper ids for {self.n} rows")
            # polars sorts strings by their UTF-8 bytes: code point order, as Python compares them (ids are unique)
            self.tie_rank[pl.Series(ids, dtype=pl.String).arg_sort().to_numpy()] = np.arange(self.n)
            self.tie = self.tie_rank.__getitem__

    def node_rows(self, node: int) -> dict[str, sp.csr_matrix]:
        """The walk rows of a corpus paper (its edges in each facet)."""
        return {f: w[node] for f, w in self.walk.items()}

    def facet_list(self, facet: str, row: sp.csr_matrix, exclude: set[int]) -> list[FacetCandidate]:
        """Ranked candidates of one facet for a query row (1 x n), best first, ties by node id."""
        w = self.walk[facet]
        row = sp.csr_matrix(row, dtype=np.float32)
        if row.nnz == 0:
            return []
        one = row.toarray().ravel()
        two = (row @ w).toarray().ravel() / float(row.data.sum())
        score = one + self.config.two_hop_weight * two
        for node in exclude:
            score[node] = 0.0
        cand = np.flatnonzero(score > 0)
        order = np.lexsort((self.tie_rank[cand], -score[cand]))[: self.config.depth]
        cand = cand[order]
        # Strongest two-hop path per candidate, for provenance.
        nbrs = row.indices
        paths = w[nbrs][:, cand].toarray() * row.data[:, None]
        best = paths.argmax(axis=0) if len(nbrs) else np.zeros(len(cand), dtype=np.int64)
        out = []
        for k, c in enumerate(cand):
            if one[c] > 0:
                out.append(FacetCandidate(int(c), float(score[c]), float(one[c]), 1, None, k + 1))
            else:
                out.append(FacetCandidate(int(c), float(score[c]), float(paths[best[k], k]), 2,
                                          int(nbrs[best[k]]), k + 1))
        return out

    def retrieve(
        self, rows: dict[str, sp.csr_matrix], *, exclude: set[int] | None = None, k: int = 20
    ) -> tuple[list[tuple[int, float, dict[str, float]]], dict[str, dict[int, FacetCandidate]]]:
        """Fuse the per-facet lists of a query given by its facet rows.

        Returns:
            (fused, per_facet): fused = [(node, score, facet -> RRF term)] best first, at most k;
            per_facet = facet -> node -> FacetCandidate (provenance). With the citation channel,
            `CITATION` is a key of both, next to the facets.
        """
        exclude = exclude or set()
        lists = {f: self.facet_list(f, rows[f], exclude) for f in FACETS if f in rows}
        runs = {f: [c.node for c in cands] for f, cands in lists.items()}
        fused = rrf(runs, k=self.config.rrf_k, tie=self.tie)
        if self.config.citation_weight > 0:
            order = [int(x.doc) for x in fused]
            lists[CITATION] = self.citation_list(order, exclude)
            runs[CITATION] = [c.node for c in lists[CITATION]]
            facet_fused = fused
            fused = rrf(runs, k=self.config.rrf_k, weights={CITATION: self.config.citation_weight}, tie=self.tie)
            fused = keep_first(facet_fused, fused, self.config.citation_keep)
        per_facet = {f: {c.node: c for c in cands} for f, cands in lists.items()}
        return [(int(x.doc), x.score, dict(x.terms)) for x in fused[:k]], per_facet

    def citation_list(self, order: list[int], exclude: set[int]) -> list[FacetCandidate]:
        """The citation channel's run for a facet fusion's ranking `order`, as candidates (score and
        weight = the share of the first R results a paper is linked to; `linked` = those results)."""
        first = order[: self.config.citation_first]
        run = cited_with(self.links, first, order, exclude, self.config.citation_depth)
        linked = linked_first(self.links, first, [node for node, _ in run])
        return [FacetCandidate(node, share, share, 1, None, rank, tuple(papers), len(first))
                for rank, ((node, share), papers) in enumerate(zip(run, linked), start=1)]
