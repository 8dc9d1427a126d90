"""What the explorer asks of an index: every call `graft serve` makes into GRAFT's query code.

`Explorer` finds papers (a corpus id, a title fragment, a pasted title + abstract), answers the view
around a paper (the query's results as `graft query --paper/--text --explain --json` gives them,
with the graph's edges among the papers shown), the "same problem, different method" pivot, a
paper's card (`graft info --paper`), and exports a view as BibTeX and GraphML. The web layer
(`graft.web.app`) calls nothing else of GRAFT, so the query path it uses is named here only.
"""

from __future__ import annotations

import io
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from graft.errors import GraftError
from graft.facets import FACETS
from graft.index import Index

#: Longest search text accepted, in characters: a title and an abstract, not a whole paper.
MAX_TEXT_CHARS = 20_000
#: Results shown around a paper: default and most.
DEFAULT_K, MAX_K = 20, 50
#: Candidates the pivot ranks (the query's results at this depth).
PIVOT_DEPTH = 100
#: Words below which a search that is not an id is read as a title fragment; at or above, a paper's text.
TEXT_WORDS = 25
#: The view modes: the query's ranking, or "same problem, different method".
MODES = ("related", "pivot")
#: Edges between results shown, per result (each pair's strongest facet, heaviest pairs first).
SIDE_EDGES = 2

#: Most seed papers a view takes (a collection's papers, fused: `Searcher.seeds`).
MAX_SEEDS = 50
#: Papers listed as a view's prior works and derivative works.
LINEAGE_K = 10
#: What a result's score means, as the card says it (the facet weights and cosines are shown on request).
SCORE_MEANING = ("rank-fusion score: the sum over the four facet walks (and the citation channel) of "
                 "1/(60 + the result's rank there); higher means ranked high by more facets. Only the order "
                 "it gives is meaningful, not its size.")

SEEDS_MEANING = ("rank-fusion score over the seeds: the sum over the seeds whose results hold it of 1/(60 + its "
                 "rank there); higher means ranked high for more seeds. Only the order it gives is meaningful.")

#: The graph node of a pasted paper: with a space, so that no corpus id (one word) can be it.
QUERY_NODE = "the query"

_WORD = re.compile(r"\w+")

#: The columns of papers.parquet a paper's links out are read from (`Explorer.links_of`).
LINK_COLUMNS = ("doi", "url", "arxiv")


class NotFound(GraftError):
    """A paper id the index does not hold."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Explorer:
    """Read-only queries of one index for the web explorer, with the index's artefacts, the
    teacher and the title search loaded once (`warm`). Calls are serialised: the index's lazily
    loaded parts are built once whatever the number of browser tabs."""

    def __init__(self, index_dir: str | Path, *, survey_config: Any = None, encoder: Any = None) -> None:
        self.index = Index.open(index_dir)
        self.survey_config, self.encoder = survey_config, encoder
        self._lock = threading.RLock()
        self._related: dict[int, Any] = {}

    # ---- set-up ------------------------------------------------------------------------------
    def warm(self) -> None:
        """Load what every view needs (titles and years, graphs, citation links, the teacher's walk
        matrices, the title search) so that the first page answers as fast as the next. Abstracts and
        facet items are read a paper at a time, from the row groups that hold them."""
        idx = self.index
        with self._lock:
            _ = idx.paper_column("title"), idx.paper_column("year"), idx.graphs, idx.citation_links, idx.row_of
            _ = idx.item_groups
            self._titles()
            self.summary()
            if idx.n:
                self.related_of({"id": idx.paper_ids[0]}, k=DEFAULT_K)

    def _titles(self) -> pl.Series:
        """The corpus's titles, lower-cased (one column, searched in place by `search`)."""
        if not hasattr(self, "_title_index"):
            self._title_index = self.index.paper_column("title").fill_null("").cast(pl.Utf8).str.to_lowercase()
        return self._title_index

    def summary(self) -> dict[str, Any]:
        """The index's name, size and an example paper (the best-connected one)."""
        if hasattr(self, "_summary"):
            return self._summary
        idx = self.index
        with self._lock:
            example = None
            if idx.n:
                degree = sum(np.bincount(np.asarray(g.indices)[np.asarray(g.data) > 0], minlength=idx.n)
                             for g in idx.graphs.values())
                example = idx.paper_ids[int(np.argmax(degree))]
            self._summary = {"index": idx.path.name, "papers": idx.n, "citations": int(idx.citation_matrix.nnz),
                             "facets": list(FACETS), "example": example, "retriever": "teacher",
                             "max_text_chars": MAX_TEXT_CHARS, "max_k": MAX_K, **self._years_and_venues()}
            return self._summary

    def _years_and_venues(self) -> dict[str, Any]:
        """The corpus's year range and its venues, most papers first (what the filters offer)."""
        idx = self.index
        years = idx.paper_column("year").drop_nulls()
        counts: dict[str, int] = {}
        if idx.has_paper_column("venue"):  # counted in polars: the distinct venues are few, the papers many
            named = idx.paper_column("venue").cast(pl.Utf8).str.strip_chars().drop_nulls()
            table = named.filter(named.str.len_chars() > 0).value_counts()
            counts = dict(zip(table[table.columns[0]].to_list(), table["count"].to_list()))
        venues = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].casefold()))
        return {"years": [int(years.min()), int(years.max())] if len(years) else None,
                "venues": [{"venue": v, "papers": n} for v, n in venues]}

    # ---- find --------------------------------------------------------------------------------
    def search(self, q: str, limit: int = 10) -> dict[str, Any]:
        """What a search box text is: a corpus id (`kind` "id"), a title fragment (`kind` "title",
        the titles ranked by the idf of the fragment's words they hold, the whole fragment first),
        several corpus ids separated by spaces or commas (`kind` "seeds", a seed set: a view of their
        fused results), or a paper's title + abstract (`kind` "text", to be queried as `graft query --text`).

        Raises:
            GraftError: empty, wordless or too long a text.
        """
        text = check_text(q)
        idx = self.index
        if text in idx.row_of:
            return {"kind": "id", "matches": [self._brief(text, 1.0)]}
        parts = [p for p in re.split(r"[\s,;]+", text) if p]
        if 1 < len(parts) <= MAX_SEEDS and all(p in idx.row_of for p in parts):
            return {"kind": "seeds", "matches": [self._brief(p, 1.0) for p in dict.fromkeys(parts)]}
        words = _words(text)
        if len(words) >= TEXT_WORDS:
            return {"kind": "text", "matches": []}
        with self._lock:
            titles = self._titles()
        frag = " ".join(text.lower().split())
        n = max(len(titles), 1)
        # each word of the fragment: the titles that hold it as a word, and its idf over the titles
        held, idf = {}, {}
        for w in sorted(set(words)):
            mask = titles.str.contains(rf"(?:^|\W){w}(?:\W|$)").fill_null(False).to_numpy()
            if mask.any():
                held[w], idf[w] = mask, math.log(1 + n / int(mask.sum()))
        total = sum(idf.values()) or 1.0
        share = np.zeros(len(titles))
        for w, mask in held.items():
            share += idf[w] * mask
        share /= total
        whole = titles.str.contains(frag, literal=True).fill_null(False).to_numpy()
        rows = np.flatnonzero(whole | (share > 0))
        score = whole[rows] + share[rows]
        length = titles.gather(rows).str.len_chars().to_numpy()  # of the matching titles only
        order = np.lexsort((rows, length, -score))[:limit]  # ties: the shorter title, the closer match
        matches = [self._brief(idx.paper_ids[int(rows[i])], round(float(score[i]) / 2, 4)) for i in order]
        # a near-miss id (its first letters) helps as much as a title
        if not matches and len(words) == 1:
            close = [p for p in idx.paper_ids if p.lower().startswith(text.lower()[:4])][:limit]
            matches = [self._brief(p, 0.0) for p in close]
        return {"kind": "title", "matches": matches}

    def _brief(self, paper_id: str, score: float) -> dict[str, Any]:
        row = self.index.row(paper_id)
        idx = self.index
        return {"paper_id": paper_id, "title": idx.paper_column("title")[row], "year": idx.paper_column("year")[row],
                "score": score}

    # ---- views -------------------------------------------------------------------------------
    def searcher(self, k: int, filters: Filters | None = None) -> Any:
        """The teacher's `Searcher` at depth `k` under the year and venue `filters` (made once each).

        Raises:
            QueryError: a bad filter (as `QueryConfig` says it).
        """
        from graft.query import QueryConfig, Searcher

        f = filters or Filters()
        key = (k, f.since, f.until, f.venues)
        with self._lock:
            if key not in self._related:
                if len(self._related) > 32:  # filters vary per request: keep the cache small
                    self._related.pop(next(iter(self._related)))
                self._related[key] = Searcher(self.index, QueryConfig(
                    retriever="teacher", k=k, explain=True, since=f.since, until=f.until, venues=f.venues))
            return self._related[key]

    def related_of(self, record: dict[str, Any], k: int, filters: Filters | None = None) -> Any:
        """The teacher's results for a query record, each facet credit with its closest pair of
        items (`graft query --explain`), under the year and venue `filters`."""
        with self._lock:
            related = self.searcher(k, filters)
            related.check([record])
            return related.record(record)

    def record_of(self, paper: str | None, text: str | None) -> dict[str, Any]:
        """The query record of a corpus paper id or of a pasted 'Title. Abstract ...'.

        Raises:
            NotFound: an id the index lacks. GraftError: neither or both given, or a bad text.
        """
        if (paper is None) == (text is None):
            raise GraftError("give a paper id or a text (a title and abstract), not both or neither")
        if paper is not None:
            paper = paper.strip()
            if paper not in self.index.row_of:
                try:
                    self.index.row(paper)
                except GraftError as exc:
                    raise NotFound(str(exc)) from None
            return {"id": paper}
        from graft.records import record_from_text

        return record_from_text(check_text(text))

    def view(self, paper: str | None = None, text: str | None = None, k: int = DEFAULT_K,
             mode: str = "related", filters: Filters | None = None, seeds: list[str] | None = None) -> dict[str, Any]:
        """The graph around a paper: the centre, its `k` results (as `graft query --json --explain`,
        with each hit's facet label), and the edges among them: each result's facet credits to
        the centre (weight, hops), the facet graph's strongest edges between results, and citation links.
        `mode` "pivot": the results at depth `PIVOT_DEPTH` with a problem credit, ranked by their
        problem weight less their method weight (same problem, different method). `filters`: only
        results of these years and venues (`QueryConfig.since/until/venues`; the centre is shown
        whatever its year). `seeds`: several corpus papers instead of one (a library, a collection):
        their fused results (`Searcher.seeds`), each linked to the seed it ranks best for; the first
        seed is the centre and `seeds` lists them all.

        Besides the edges, `links` are what the page draws: one per pair of papers shown, styled by
        its strongest facet, with every facet's weight and the citations between the two; `prior`
        and `derivative` are the corpus papers most cited by / most citing the view's papers
        (`lineage`); each paper carries its in-corpus citation count, venue and links out.

        Raises:
            NotFound, GraftError: an unknown id, a bad text, k, mode or filter.
        """
        if not isinstance(k, int) or not 1 <= k <= MAX_K:
            raise GraftError(f"k must be a whole number from 1 to {MAX_K}, got {k!r}")
        if mode not in MODES:
            raise GraftError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        best_seed: dict[str, str] = {}
        if seeds:
            if paper is not None or text is not None or mode != "related":
                raise GraftError("seeds take the place of a paper or a text, in the related view only")
            seeds = self._seed_ids(seeds)
            with self._lock:
                result = self.searcher(k, filters).seeds(seeds)
            for h in result.hits:  # the seed whose evidence the hit carries: its best rank, first seed on ties
                by = result.info["surfaced_by"][h.paper_id]
                best_seed[h.paper_id] = min(by, key=lambda s: (by[s], seeds.index(s)))
            paper, record = seeds[0], {"id": seeds[0]}
        else:
            record = self.record_of(paper, text)
            result = self.related_of(record, PIVOT_DEPTH if mode == "pivot" else k, filters)
        hits = result.hits
        if mode == "pivot":
            def gap(h: Any) -> float:
                p = h.evidence["problem"].weight
                m = h.evidence["method"].weight if "method" in h.evidence else 0.0
                return p - m

            hits = sorted((h for h in hits if "problem" in h.evidence and h.evidence["problem"].weight > 0),
                          key=lambda h: (-gap(h), h.rank))[:k]
        idx = self.index
        centre_id = record["id"] if paper is not None else None
        if centre_id is not None:
            row = idx.row(centre_id)
            centre = {"id": centre_id, "paper_id": centre_id, "title": idx.paper_column("title")[row],
                      "year": idx.paper_column("year")[row], "outside": False, **self._node_facts(centre_id)}
        else:
            centre = {"id": QUERY_NODE, "paper_id": None, "title": record.get("title") or "(the pasted text)",
                      "year": None, "outside": True, "facets": result.info.get("query_facets", {})}
        listed = []
        for pos, h in enumerate(hits, start=1):
            item = h.to_json()  # as `graft query --json`: facets = edge weights, contributions = RRF terms
            item["label"] = h.facet_label()
            item["position"] = pos
            item.update(self._node_facts(h.paper_id))
            if mode == "pivot":
                p = h.evidence["problem"].weight
                m = h.evidence["method"].weight if "method" in h.evidence else 0.0
                item["pivot"] = {"problem": round(p, 4), "method": round(m, 4)}
            listed.append(item)
        centres = seeds or ([centre_id] if centre_id is not None else [])
        edges = self._edges(centres, hits, best_seed)
        shown = [*centres, *(h.paper_id for h in hits)]
        prior, derivative = self.lineage(shown)
        f = filters or Filters()
        return {"centre": centre, "mode": mode, "k": k, "hits": listed, "edges": edges, "links": pair_links(edges),
                "prior": prior, "derivative": derivative, "retriever": result.retriever,
                "filters": {"since": f.since, "until": f.until, "venues": list(f.venues)},
                "score": {"name": "rank-fusion score", "meaning": SEEDS_MEANING if seeds else SCORE_MEANING},
                "seeds": [{"id": s, "paper_id": s, "title": idx.paper_column("title")[idx.row_of[s]],
                           "year": idx.paper_column("year")[idx.row_of[s]], "outside": False, **self._node_facts(s)}
                          for s in seeds or []]}

    def _seed_ids(self, seeds: Any) -> list[str]:
        """A seed list checked: corpus paper ids, at most `MAX_SEEDS`, each once (first kept).

        Raises:
            GraftError: not a list of strings, too many. NotFound: an id the index lacks.
        """
        if not isinstance(seeds, list) or not all(isinstance(x, str) and x.strip() for x in seeds):
            raise GraftError("seeds must be a list of corpus paper ids (strings)")
        ids = list(dict.fromkeys(x.strip() for x in seeds))
        if len(ids) > MAX_SEEDS:
            raise GraftError(f"{len(ids)} seeds; a view takes at most {MAX_SEEDS}: choose fewer papers")
        for x in ids:
            if x not in self.index.row_of:
                try:
                    self.index.row(x)
                except GraftError as exc:
                    raise NotFound(str(exc)) from None
        return ids

    def _node_facts(self, paper_id: str) -> dict[str, Any]:
        """What the map shows of a corpus paper besides its title and year: its in-corpus citation
        count (node size), venue and links out (arXiv, DOI, URL)."""
        row = self.index.row_of[paper_id]
        record = self.index.paper_record(row, ("venue", *LINK_COLUMNS))  # one read of its row group
        return {"cited_by": int(self._cited_by()[row]), "venue": record["venue"],
                "links": self.links_of(paper_id, record)}

    def _cited_by(self) -> np.ndarray:
        if not hasattr(self, "_cited_by_counts"):
            self._cited_by_counts = np.asarray(self.index.citation_matrix.sum(axis=0)).ravel().astype(np.int64)
        return self._cited_by_counts

    def links_of(self, paper_id: str, record: dict[str, Any] | None = None) -> dict[str, str]:
        """A corpus paper's links out: `arxiv` (an arXiv id, from its record's arxiv, DOI or URL fields
        or its id), `doi` and `url` where known (`graft.identifiers.links`), each with its page URL
        (`arxiv_url`, `doi_url`). `record`: its `LINK_COLUMNS` already read (`Index.paper_record`)."""
        from graft.identifiers import links

        if record is None:
            record = self.index.paper_record(self.index.row_of[paper_id], LINK_COLUMNS)
        found = links(paper_id, doi_text=record["doi"], url=record["url"], arxiv=record["arxiv"]).as_dict()
        if "arxiv" in found:
            found["arxiv_url"] = f"https://arxiv.org/abs/{found['arxiv']}"
        if "doi" in found:
            found["doi_url"] = f"https://doi.org/{found['doi']}"
        return found

    def lineage(self, paper_ids: list[str], limit: int = LINEAGE_K) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Prior and derivative works of a set of corpus papers, as Connected Papers defines them:
        prior works are the corpus papers most cited by the set's papers, derivative works those
        citing most of them, each counted over in-corpus citation links (`count`: how many of the
        set's papers it is cited by / cites). Ties: more in-corpus citations overall, then the id.
        Papers of the set itself may appear (`in_view`); at most `limit` of each, counts of 1 or more."""
        idx = self.index
        if not paper_ids:
            return [], []
        rows = np.array([idx.row_of[p] for p in paper_ids], dtype=np.int64)
        a = idx.citation_matrix
        cited = np.asarray(a[rows].sum(axis=0)).ravel()  # by how many of the set each paper is cited
        citing = np.asarray(a[:, rows].sum(axis=1)).ravel()  # how many of the set each paper cites
        inside, total = set(paper_ids), self._cited_by()

        def top(counts: np.ndarray) -> list[dict[str, Any]]:
            found = np.nonzero(counts > 0)[0]
            order = sorted(found.tolist(), key=lambda r: (-counts[r], -total[r], idx.paper_ids[r]))[:limit]
            return [{"paper_id": idx.paper_ids[r], "title": idx.paper_column("title")[r],
                     "year": idx.paper_column("year")[r],
                     "count": int(counts[r]), "cited_by": int(total[r]), "in_view": idx.paper_ids[r] in inside}
                    for r in order]

        return top(cited), top(citing)


    def _edges(self, centres: list[str], hits: list[Any], source_of: dict[str, str] | None = None,
               ) -> list[dict[str, Any]]:
        """The view's edges: centre -> each hit per crediting facet (its evidence; the centre is
        `source_of[hit]` where given, a seed, else the first of `centres`, else the pasted paper),
        facet edges between hits (each pair's strongest facet, either direction of the stored top-k
        rows; the heaviest `SIDE_EDGES` per hit), citation links among all."""
        idx = self.index
        source_of = source_of or {}
        first = centres[0] if centres else QUERY_NODE
        edges = []
        for h in hits:
            for facet, ev in h.evidence.items():
                if ev.weight > 0:
                    edges.append({"source": source_of.get(h.paper_id, first), "target": h.paper_id, "facet": facet,
                                  "weight": round(float(ev.weight), 4), "hops": ev.hops, "centre": True})
        ids = [h.paper_id for h in hits]
        rows = np.array([idx.row_of[p] for p in ids], dtype=np.int64)
        if len(rows) > 1:
            # between results: each pair's strongest facet edge, the heaviest SIDE_EDGES per result
            stack = []
            for facet in FACETS:
                sub = idx.graphs[facet][rows][:, rows].toarray()
                stack.append(np.triu(np.maximum(sub, sub.T), 1))
            weights = np.stack(stack)
            best, facet_of = weights.max(axis=0), weights.argmax(axis=0)
            pairs = sorted(zip(*np.nonzero(best)), key=lambda ij: (-best[ij], ij))[:SIDE_EDGES * len(ids)]
            for i, j in pairs:
                edges.append({"source": ids[i], "target": ids[j], "facet": FACETS[int(facet_of[i, j])],
                              "weight": round(float(best[i, j]), 4), "hops": 1, "centre": False})
        allids = [*centres, *ids]
        allrows = np.array([idx.row_of[p] for p in allids], dtype=np.int64)
        inner = set(centres)
        if len(allrows) > 1:
            cites = idx.citation_matrix[allrows][:, allrows].tocoo()
            for i, j in zip(cites.row.tolist(), cites.col.tolist()):
                edges.append({"source": allids[i], "target": allids[j], "facet": "citation", "weight": 1.0,
                              "hops": 1, "centre": allids[i] in inner or allids[j] in inner})
        return edges

    def card(self, paper_id: str) -> dict[str, Any]:
        """A corpus paper's card: title, year, venue, its four facets' items, abstract, citation
        counts inside the corpus (`graft info --paper`).

        Raises:
            NotFound: the id is not in the index.
        """
        from graft.describe import paper_card

        with self._lock:
            if paper_id not in self.index.row_of:
                try:
                    self.index.row(paper_id)
                except GraftError as exc:
                    raise NotFound(str(exc)) from None
            card = paper_card(self.index, paper_id, k=5)
            row = self.index.row(paper_id)
            record = self.index.paper_record(row, ("abstract", "authors", *LINK_COLUMNS))  # one read
            card["abstract"] = record["abstract"]
            authors = record["authors"]
            card["authors"] = list(authors) if authors is not None else []
            card["links"] = self.links_of(paper_id, record)
            return card

    # ---- exports -----------------------------------------------------------------------------
    def bibtex(self, paper_ids: list[str]) -> str:
        """BibTeX entries of corpus papers, in the order given (as a survey's references.bib)."""
        from graft.survey.output import render_bibtex

        known = self._known(paper_ids)
        return render_bibtex(self.index, {pid: i for i, pid in enumerate(known, start=1)})

    def graphml(self, view: dict[str, Any]) -> str:
        """A view (`view`'s answer) as GraphML: its papers with title and year, its edges with
        `relation` (facet or citation), `facet` and `weight`; texts made XML-safe."""
        import networkx as nx

        from graft.export import xml_safe

        g = nx.MultiDiGraph(name=xml_safe(f"graft:{self.index.path.name}"))
        for c in view.get("seeds") or [view["centre"]]:  # a seed set's papers are each a centre
            g.add_node(xml_safe(c["id"]), title=xml_safe(str(c["title"] or "")), centre=True,
                       **({"year": int(c["year"])} if c.get("year") else {}))
        for h in view["hits"]:
            g.add_node(xml_safe(h["paper_id"]), title=xml_safe(h["title"] or ""), centre=False,
                       rank=int(h["rank"]), label=xml_safe(h["label"]), **({"year": int(h["year"])} if h["year"] else {}))
        for n, e in enumerate(view["edges"]):
            rel = "citation" if e["facet"] == "citation" else "facet"
            g.add_edge(xml_safe(e["source"]), xml_safe(e["target"]), key=f"{e['facet']}-{n}", id=f"{e['facet']}-{n}",
                       relation=rel, facet="" if rel == "citation" else e["facet"], weight=float(e["weight"]),
                       hops=int(e["hops"]))
        buf = io.BytesIO()
        nx.write_graphml(g, buf, edge_id_from_attribute="id")
        return buf.getvalue().decode("utf-8")

    def _known(self, paper_ids: list[str]) -> list[str]:
        unknown = [p for p in paper_ids if p not in self.index.row_of]
        if unknown:
            raise NotFound(f"{len(unknown)} paper id(s) not in index '{self.index.path.name}', e.g. {unknown[0]!r}")
        return list(dict.fromkeys(paper_ids))

    # ---- surveys -----------------------------------------------------------------------------
    @staticmethod
    def check_topic(topic: str) -> str:
        """A survey topic as `graft survey` takes it (one line, at most 500 characters), with words.

        Raises:
            GraftError: empty, too long, or without words.
        """
        from graft.survey.pipeline import clean_topic

        text = clean_topic(topic)
        if not any(ch.isalnum() for ch in text):
            raise GraftError("the topic has no words: give a phrase such as \"neural machine translation\"")
        return text

    def write_survey(self, topic: str, out: Path, reporter: Any) -> Any:
        """Write a survey of `topic` into `out` as `graft survey INDEX TOPIC --out OUT` does (its
        defaults, offline writer, unless the explorer was given a `SurveyConfig`); returns its
        `SurveyResult`."""
        from cli.survey_cmd import run_survey

        return run_survey(self.index.path, topic, out, self.survey_config, reporter, encoder=self.encoder)


@dataclass(frozen=True)
class Filters:
    """A view's year and venue filters, as `QueryConfig` takes them (None / empty: no filter)."""

    since: int | None = None
    until: int | None = None
    venues: tuple[str, ...] = ()

    def check(self) -> Filters:
        """These filters, checked as a `QueryConfig` checks them.

        Raises:
            QueryError: a bad year, since after until, or an empty venue name.
        """
        from graft.query import QueryConfig

        QueryConfig(since=self.since, until=self.until, venues=self.venues)
        return self


def pair_links(edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the page draws: one link per pair of papers, from a view's edges. A link's `facet` is its
    strongest facet (`weight`, `hops` are that facet's; "citation" for a pair linked by citations
    only), `facets` maps every facet to its weight, and `cites` lists the citations between the two
    ("forward": source cites target, "backward": target cites source)."""
    links: dict[frozenset[str], dict[str, Any]] = {}
    for e in edges:
        key = frozenset((e["source"], e["target"]))
        link = links.setdefault(key, {"source": e["source"], "target": e["target"], "facet": "citation",
                                      "weight": 0.0, "hops": 1, "facets": {}, "cites": [], "centre": False})
        link["centre"] = link["centre"] or e["centre"]
        if e["facet"] == "citation":
            link["cites"].append("forward" if e["source"] == link["source"] else "backward")
            continue
        link["facets"][e["facet"]] = e["weight"]
        if link["facet"] == "citation" or e["weight"] > link["weight"]:
            link.update(facet=e["facet"], weight=e["weight"], hops=e["hops"])
    for link in links.values():
        if link["facet"] == "citation":
            link["weight"] = 1.0
    return list(links.values())


def check_text(q: Any) -> str:
    """A search or query text, stripped.

    Raises:
        GraftError: not a string, empty, without words, or over `MAX_TEXT_CHARS`.
    """
    if not isinstance(q, str):
        raise GraftError(f"the search text must be a string, got {type(q).__name__}")
    text = q.strip()
    if not text:
        raise GraftError("the search is empty: type a paper id, words of a title, or paste a title and abstract")
    if len(text) > MAX_TEXT_CHARS:
        raise GraftError(f"the text is {len(text):,} characters long; paste a title and abstract of at most "
                         f"{MAX_TEXT_CHARS:,} characters")
    if not any(ch.isalnum() for ch in text):
        raise GraftError("the search has no words: type a paper id, words of a title, or a title and abstract")
    return text
