"""Rank fusion as pure functions: plain RRF, graph-weighted RRF, the support the generative
retriever's fusions weigh candidates with (`support_rows`, `corroboration`), the citation
channel's run (`cited_with`) and the text channel's (`text_run`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from graft.errors import ConfigError

#: RRF constant of Cormack et al. (2009); it damps the head of each list, it is not a cut-off.
RRF_K = 60
#: The generative retriever's fusions (`graft.retriever`): graph-weighted RRF, plain RRF, and the
#: graph-RRF candidates walked by the graph teacher.
FUSIONS = ("graph-rrf", "rrf", "graph-walk")

#: The citation channel: a fifth run fused next to the four facet lists, of the papers that cite or are
#: cited by the first results of the facet fusion (`cited_with`); its hits carry citation evidence,
#: never a facet credit.
CITATION = "citation"
#: R: first results of the facet fusion whose citation links make the channel's run.
CITATION_FIRST = 3
#: W: the channel's weight in the fusion (each facet list weighs 1). Chosen on cs768's dev papers, in
#: corpus (graph teacher), posed as text-only queries (graph teacher and a stand-in for the generative
#: retriever's decoder): docs/results/citation_channel_cs768.md.
CITATION_WEIGHT = 3.0
#: Papers kept in the channel's run.
CITATION_DEPTH = 100
#: The first results of the facet fusion that the citation channel never pushes down
#: (`keep_first`): the papers a user sees first stay the ones the facets found best. Measured on
#: cs768's leak-free in-corpus dev split: docs/results/citation_keep_cs768.md.
CITATION_KEEP = 3
#: How far a kept result's score is raised above the next result's (`keep_first`).
KEEP_STEP = 1e-6

#: The text channel, for a query outside the corpus given with its text: a run of the corpus papers
#: whose title + abstract reads most like the query's (`text_run`), fused next to the facet lists
#: before the citation channel is made; its hits carry text evidence, never a facet credit. The
#: query has no citation links, so this is the generative retriever's counterpart of the text coupling
#: that stands in for them in the graph teacher's rows (`graft.external.text_coupling_row`).
TEXT = "text"
#: W_t: the text channel's weight (each facet list weighs 1); in graph-RRF each of its papers is
#: supported by W_t x its cosine. Chosen on cs768's dev papers posed as text-only queries with a
#: stand-in decoder: docs/results/ooc_fusion_proxy_cs768.md.
TEXT_WEIGHT = 2.0
#: Runs fused next to the facet lists that credit no facet.
CHANNELS = (CITATION, TEXT)


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Candidates best first, ties broken by paper id (deterministic)."""
    return sorted(scores, key=lambda p: (-scores[p], p))


@dataclass
class Fused:
    """One fused candidate: its total score and each run's term (run name -> 1 / (k + rank))."""

    doc: Hashable
    score: float
    terms: dict[str, float] = field(default_factory=dict)


def rrf(runs: Mapping[str, Sequence[Hashable]], k: int = RRF_K,
        weights: Mapping[str, float] | None = None, tie: Callable[[Hashable], Any] = str) -> list[Fused]:
    """Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009).

    score(d) = sum over runs r containing d of m_r / (k + rank_r(d)), ranks starting at 1, m_r = 1
    unless `weights` says otherwise.

    Args:
        runs: run name -> ranked documents, best first (a document appears at most once per run).
        k: the RRF constant (60 in the paper). It flattens the contribution of top ranks; it is not
            the number of documents kept.
        weights: run name -> m_r >= 0 (missing: 1).
        tie: a document's key among equal scores (default `str(doc)`; the retrievers, which fuse
            corpus rows, pass the row's paper id, so ties fall as in their TREC run files).
    Returns:
        Fused documents sorted by (-score, tie(doc)) so the order is deterministic; `terms` says which
        runs contributed and how much.
    """
    if k < 0:
        raise ConfigError(f"rrf: k must be >= 0, got {k}")
    weights = weights or {}
    if any(m < 0 for m in weights.values()):
        raise ConfigError(f"rrf: run weights must be >= 0, got {dict(weights)}")
    fused: dict[Hashable, Fused] = {}
    for name, docs in runs.items():
        m = float(weights.get(name, 1.0))
        if m == 0.0:
            continue
        for rank, doc in enumerate(docs, start=1):
            term = m / (k + rank)
            entry = fused.setdefault(doc, Fused(doc, 0.0))
            entry.score += term
            entry.terms[name] = entry.terms.get(name, 0.0) + term
    return sorted(fused.values(), key=lambda f: (-f.score, tie(f.doc)))


@dataclass
class GraphFused:
    """The result of `graph_rrf`: the kept candidates, best first, and the dropped ones."""

    fused: list[Fused]
    dropped: list[Hashable]  # candidates no facet's edge supports, sorted by str(doc)


def graph_rrf(
    runs: Mapping[str, Sequence[Hashable]],
    support: Mapping[str, Mapping[Hashable, float]],
    k: int = RRF_K,
    tie: Callable[[Hashable], Any] = str,
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
        tie: a candidate's key among equal scores (as in `rrf`).
    Returns:
        `GraphFused`: kept candidates sorted by (-score, tie(doc)), each with `terms` = the facets
        whose term is non-zero and that term's value (the attribution); and the dropped candidates.
    Raises:
        ValueError: k < 0 or a negative weight.
    """
    if k < 0:
        raise ConfigError(f"graph_rrf: k must be >= 0, got {k}")
    fused: dict[Hashable, Fused] = {}
    seen: set[Hashable] = set()
    for name, docs in runs.items():
        weights = support.get(name, {})
        for rank, doc in enumerate(docs, start=1):
            seen.add(doc)
            w = float(weights.get(doc, 0.0))
            if w < 0:
                raise ConfigError(f"graph_rrf: negative support {w} for {doc!r} in {name!r}; weights must be >= 0")
            if w == 0.0:
                continue
            term = w / (k + rank)
            entry = fused.setdefault(doc, Fused(doc, 0.0))
            entry.score += term
            entry.terms[name] = entry.terms.get(name, 0.0) + term
    dropped = sorted(seen - set(fused), key=str)
    return GraphFused(sorted(fused.values(), key=lambda f: (-f.score, tie(f.doc))), dropped)


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


def cited_with(links: sp.csr_matrix, first: Sequence[int], order: Sequence[int],
               exclude: Iterable[int] = (), depth: int = CITATION_DEPTH) -> list[tuple[int, float]]:
    """The citation channel's run: the corpus papers that cite or are cited by one of `first`.

    These are the first results of a query's facet fusion. Each paper gets the share of `first` it
    is linked to. Papers are ranked by that share, then by position in `order` (the facet fusion's
    ranking; papers not in it come after), then by row.

    Args:
        links: n x n symmetric 0/1 citation links (`Index.citation_links`).
        first: corpus rows of the first results.
        order: corpus rows of the facet fusion's ranking, best first.
        exclude: rows never returned (the query paper, a query's known references).
        depth: papers kept.
    Returns:
        [(row, share)] best first, share in (0, 1].
    """
    first = np.asarray(list(first), dtype=np.int64)
    if not len(first) or depth <= 0:
        return []
    share = np.asarray(links[first].sum(axis=0), dtype=np.float64).ravel() / len(first)
    for row in exclude:
        share[row] = 0.0
    cand = np.flatnonzero(share > 0)
    if not len(cand):
        return []
    pos = {int(c): i for i, c in enumerate(order)}
    tie = np.array([pos.get(int(c), len(pos)) for c in cand], dtype=np.int64)
    top = cand[np.lexsort((cand, tie, -share[cand]))][:depth]
    return [(int(c), float(share[c])) for c in top]


def linked_first(links: sp.csr_matrix, first: Sequence[int], nodes: Sequence[int]) -> list[list[int]]:
    """Per paper of `nodes`, the rows of `first` (the first results of a facet fusion) it cites or is
    cited by, in `first`'s order: the evidence of a citation channel hit (`cited_with`)."""
    if not len(nodes) or not len(first):
        return [[] for _ in nodes]
    hit = links[np.asarray(list(first), dtype=np.int64)][:, np.asarray(list(nodes), dtype=np.int64)].toarray() > 0
    return [[int(first[i]) for i in np.flatnonzero(hit[:, j])] for j in range(len(nodes))]


def add_citation_run(runs: Mapping[str, Sequence[int]], fused: Sequence[Fused], links: sp.csr_matrix,
                     weight: float, *, support: Mapping[str, Mapping[int, float]] | None = None,
                     exclude: Iterable[int] = (), first: int = CITATION_FIRST, depth: int = CITATION_DEPTH,
                     ) -> tuple[dict[str, list[int]], dict[str, dict[int, float]] | None, list[int]]:
    """The runs (and graph-RRF support) with the citation channel's run added, made from a facet
    fusion; `runs`, `fused` and `support` are left as they are.

    The run is `cited_with` over the first `first` documents of `fused` (at most `depth` papers);
    runs and `fused` hold corpus rows. With `support` (graph-RRF), each of the run's papers is
    supported by `weight` x its share. Without it (plain RRF), fuse the runs again with
    `weights={CITATION: weight}`.

    Returns:
        (runs, support or None, the first results the run was made from as corpus rows): new dicts.
    """
    order = [int(x.doc) for x in fused]
    top = order[:first]
    run = cited_with(links, top, order, exclude, depth)
    runs_out = {name: list(docs) for name, docs in runs.items()}
    runs_out[CITATION] = [c for c, _ in run]
    support_out = None
    if support is not None:
        support_out = {name: dict(w) for name, w in support.items()}
        support_out[CITATION] = {c: weight * share for c, share in run}
    return runs_out, support_out, top


def keep_first(facet_fused: Sequence[Fused], fused: Sequence[Fused], keep: int) -> list[Fused]:
    """The fusion with the citation channel (`fused`), with the first `keep` results of the facet
    fusion alone (`facet_fused`) put back at the top, in their order: the channel adds papers linked
    to the best facet results and may reorder the rest, but never pushes those results down.

    A kept result's score is raised just above the next result's where the channel had ranked that
    one higher (by `KEEP_STEP` per rank), so that ranks and scores agree (TREC files sort by score);
    its `terms` stay its fused contributions. Returns copies; the inputs are left as they are.
    """
    if keep <= 0 or not facet_fused:
        return [Fused(x.doc, x.score, dict(x.terms)) for x in fused]
    top = [x.doc for x in facet_fused[:keep]]
    by_doc = {x.doc: x for x in fused}
    head = [Fused(d, by_doc[d].score, dict(by_doc[d].terms)) for d in top if d in by_doc]
    kept = {x.doc for x in head}
    rest = [Fused(x.doc, x.score, dict(x.terms)) for x in fused if x.doc not in kept]
    floor = rest[0].score if rest else None
    for entry in reversed(head):
        if floor is not None and entry.score <= floor:
            entry.score = floor + KEEP_STEP
        floor = entry.score
    return head + rest


def text_run(neighbours: Mapping[int, float], exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
    """The text channel's run: the query's nearest corpus papers by title + abstract.

    Args:
        neighbours: corpus row -> cosine of its title + abstract embedding with the query's (the
            query's `text_neighbours` nearest; `graft.external.text_coupling_row`).
        exclude: rows never returned.
    Returns:
        [(row, cosine)] with cosine > 0, by cosine then row.
    """
    skip = set(exclude)
    run = [(int(r), float(c)) for r, c in neighbours.items() if c > 0 and int(r) not in skip]
    return sorted(run, key=lambda x: (-x[1], x[0]))
