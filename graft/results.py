"""Typed query results shared by every retriever, with JSON and TREC serialisations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from graft.errors import InputValidationError

#: A facet stands out for a result (`Hit.stands_out`) when its edge weight is within this margin of
#: the result's strongest facet's weight.
STANDOUT_MARGIN = 0.05


def standout_facets(weights: dict[str, float], hops: dict[str, int] | None = None) -> list[str]:
    """The facets a result's label names, strongest first.

    Most results are reached by every facet at similar weights (0.4 to 0.7); the label names the
    facets that say why this one came up. Where some facet links the result to the query by a direct
    edge (hops 1; a facet without recorded hops counts as direct), only such facets are candidates: a
    two-hop path says the result is related to a neighbour of the query, not to the query. Among direct
    facets, those whose weight is within `STANDOUT_MARGIN` of the strongest are named (all of them when
    none has a positive weight); a result reached only through neighbours names its strongest path's
    facet (several only when their paths weigh the same): one path is its explanation.

    Args:
        weights: facet -> its edge weight (`Hit.weights`).
        hops: facet -> 1 (direct edge) or 2 (through one intermediate paper).
    """
    hops = hops or {}
    direct = [f for f in weights if hops.get(f, 1) == 1]
    pool = direct or list(weights)
    order = sorted(pool, key=lambda f: (-weights[f], f))
    if not order:
        return []
    best = weights[order[0]]
    if best <= 0:
        return order
    margin = STANDOUT_MARGIN if direct else 0.0
    return [f for f in order if weights[f] >= best - margin]


@dataclass
class ItemMatch:
    """The query's and the result's facet items most alike in one facet (`graft.explain`): the
    relation in the papers' own words."""

    query: str  # the query paper's item
    hit: str  # the result's item of the same facet
    cosine: float  # their cosine in the facet graph's item vectors (`embeddings/items.npy`)
    # the words the two papers share in this facet (title and items), the largest part of their
    # lexical cosine first (`graft.lexical`); none where the index blends in no lexical rows
    words: list[str] = field(default_factory=list)


@dataclass
class Evidence:
    """Why one facet surfaced a result: the graph walk that reached it."""

    weight: float  # edge weight w_f(q, c) for one-hop hits; the propagated two-hop weight otherwise
    hops: int  # 1 = direct facet edge, 2 = reached through one intermediate paper
    via: str | None = None  # paper id of the intermediate paper on the strongest two-hop path
    rank: int = 0  # rank of the result in this facet's list (1-based)
    match: ItemMatch | None = None  # the closest pair of items, where asked for (`graft.explain`)


@dataclass
class CitationEvidence:
    """Why the citation channel surfaced a result (`graft.fusion.cited_with`): it cites or is cited
    by some of the query's first results (those of the facet fusion)."""

    term: float  # its contribution to the hit's score
    share: float  # share of the first results it is linked to
    papers: list[str]  # paper ids of those first results
    first: int  # how many first results the channel used
    rank: int = 0  # rank of the result in the channel's run (1-based)


@dataclass
class TextEvidence:
    """Why the text channel surfaced a result (`graft.fusion.text_run`): its title + abstract reads
    like the query's (a query outside the corpus, given with its text)."""

    term: float  # its contribution to the hit's score
    cosine: float  # cosine of the two title + abstract embeddings
    rank: int = 0  # rank of the result in the channel's run (1-based)


@dataclass
class Hit:
    """One retrieved paper."""

    paper_id: str
    title: str
    rank: int
    score: float
    facets: dict[str, float]  # facet -> its contribution to `score` (the attribution)
    evidence: dict[str, Evidence] = field(default_factory=dict)
    year: int | None = None
    citation: CitationEvidence | None = None  # the citation channel's part of `score`, if any
    text: TextEvidence | None = None  # the text channel's part of `score`, if any

    def weights(self) -> dict[str, float]:
        """Per credited facet, its edge weight w_f(q, c) (`Evidence.weight`; the facet's RRF term
        where a retriever recorded no evidence): the one number the table and `--json` show for a
        facet."""
        return {f: (self.evidence[f].weight if f in self.evidence else self.facets[f]) for f in self.facets}

    def stands_out(self) -> list[str]:
        """The facets that stand out for this result, strongest first (`standout_facets` over its
        edge weights and hops): a direct facet edge to the query outranks any two-hop path, and
        among the facets left, those within `STANDOUT_MARGIN` of the strongest are named."""
        return standout_facets(self.weights(), {f: e.hops for f, e in self.evidence.items()})

    def facet_label(self) -> str:
        """Human-readable attribution: the facets that stand out (`stands_out`) with their edge
        weights, how many other facets also reached it, then the channels: 'method 0.71 (+2 facets)
        · cited with 2 of the first 3 · reads like it 0.64'; a two-hop facet reads 'problem 0.42
        (2-hop)', a facet that surfaced the result without a graph edge to the query (plain RRF of
        decoded lists) 'result (no edge)'."""
        weights = self.weights()
        shown = self.stands_out()
        parts = []
        for f in shown:
            if f in self.evidence and weights[f] == 0.0:
                parts.append(f"{f} (no edge)")
                continue
            hop = "" if f not in self.evidence or self.evidence[f].hops == 1 else " (2-hop)"
            parts.append(f"{f} {weights[f]:.2f}{hop}")
        label = " · ".join(parts)
        if len(weights) > len(shown):
            more = len(weights) - len(shown)
            label += f" (+{more} facet{'s' if more > 1 else ''})"
        channels = []
        if self.citation is not None:
            channels.append(f"cited with {len(self.citation.papers)} of the first {self.citation.first}")
        if self.text is not None:
            channels.append(f"reads like it {self.text.cosine:.2f}")
        return " · ".join([x for x in (label, *channels) if x])

    def to_json(self) -> dict[str, Any]:
        """The `--json` form of a hit: `facets` = each credited facet's edge weight (the number the
        table shows), `stands_out` = the facets of its label, `contributions` = each facet's part of
        `score` (its RRF term), then the evidence and the channels' parts."""
        out = asdict(self)
        out["facets"] = {f: round(w, 6) for f, w in self.weights().items()}
        out["stands_out"] = self.stands_out()
        out["contributions"] = dict(self.facets)
        return out


@dataclass
class QueryResult:
    """A ranked list for one query."""

    query_id: str
    retriever: str
    fusion: str
    hits: list[Hit]
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> list[dict[str, Any]]:
        """The hits' `--json` form (`Hit.to_json`), best first."""
        return [h.to_json() for h in self.hits]

    def to_dict(self) -> dict[str, Any]:
        """The `--json` object of a result: who answered (retriever, fusion, model), `info` and the hits."""
        return {"query_id": self.query_id, "retriever": self.retriever, "fusion": self.fusion,
                "model": self.info.get("model"), "info": self.info, "hits": self.to_json()}

    def answered_by(self) -> str:
        """One line naming who answered: retriever, fusion and model."""
        model = self.info.get("model")
        return (f"retriever {self.retriever} · fusion {self.fusion}"
                + (f" · model {model}" if model else ""))

    def trec_lines(self, tag: str | None = None) -> list[str]:
        """TREC run lines of this result (see `trec_lines`); the tag defaults to the retriever."""
        return trec_lines(self.query_id, [(h.paper_id, h.score) for h in self.hits], tag or self.retriever)


def is_one_word(text: str) -> bool:
    """A non-empty string without whitespace or control characters: a field of a TREC line."""
    return bool(text) and all(c.isprintable() and not c.isspace() for c in text)


def trec_lines(query_id: str, ranked: Sequence[tuple[str, float]], tag: str) -> list[str]:
    """TREC run lines `{qid} Q0 {docid} {rank} {score} {tag}` of one query's (docid, score) pairs,
    ranked by score with ties broken by docid, so a ranking always serialises the same way. Scores
    keep 12 significant digits: fewer would tie scores that differ (fused scores such as
    0.1045761 and 0.1045760), and other tools order ties their own way.

    Raises:
        InputValidationError: a qid, docid or tag that is not one word (the fields are separated by
            whitespace), or a docid listed twice for the query.
    """
    for name, value in (("query id", query_id), ("run tag", tag)):
        if not is_one_word(str(value)):
            raise InputValidationError(f"{name} {value!r} cannot be written to a TREC run file: "
                                       "it must be one word, without spaces")
    order = sorted(ranked, key=lambda x: (-x[1], x[0]))
    seen: set[str] = set()
    for d, _ in order:
        if not is_one_word(str(d)):
            raise InputValidationError(f"paper id {d!r} (query {query_id}) cannot be written to a TREC run "
                                       "file: it must be one word, without spaces")
        if d in seen:
            raise InputValidationError(f"paper {d!r} is ranked twice for query {query_id}")
        seen.add(d)
    return [f"{query_id} Q0 {d} {r} {s:.12g} {tag}" for r, (d, s) in enumerate(order, 1)]
