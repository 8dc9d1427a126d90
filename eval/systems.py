"""The retrieval systems compared by `graft eval run`, all answering the same queries of one index.

| name | in corpus (query = a corpus paper) | out of corpus (query = title + abstract) |
|---|---|---|
| bm25 | BM25 (bm25s, English stopwords, no stemming) over title + abstract | same, the query's text |
| dense | MiniLM cosine of title + abstract embeddings | same, the query's text embedded |
| hybrid | dense blended with word overlap: (1 - μ) x the MiniLM cosine + μ x the TF-IDF cosine of title + abstract (a lexicon of the corpus, `graft.lexical`; μ = 0.5, text coupling's) | same, the query's text |
| citation | the coupling / co-citation score row of the query (n/a on a leak-free in-corpus index: the query's links are its gold, hidden) | n/a: a held-out paper has no citations to the corpus without its reference list, which is the gold |
| facet | graph teacher over facet-only graphs (beta = 0, rebuilt from the index's items) | teacher walk over those graphs from the query's facet-only edge rows |
| teacher | the graph teacher over the index (the stored rows: what the generative retriever learns) | teacher walk from `ExternalScorer` rows built from title + abstract only (with the feedback pass) |
| teacher-fb | the teacher walking the query's rows with the feedback pass (`CorpusScorer.feedback_rows`) | n/a: the teacher's out-of-corpus rows already have the pass |
| teacher-cite | the teacher's stored rows with the citation channel (`graft.fusion.cited_with`, the facet fusion's first `CITATION_KEEP` kept first: `graft query --paper`'s default) | the teacher's rows with the citation channel (`graft query --text`'s default) |
| graft | the trained generative retriever, graph-RRF | the same from the query's extracted facets (mutual corroboration) |
| graft-rrf | the same with plain RRF | the same with plain RRF |
| graft-walk | the same model, graph-RRF's candidates walked two hops by the graph teacher (`graph-walk`) | likewise |
| graft-naive | graph-RRF with a model trained on naive pairs (`naive_index`) | likewise |
| graft-cite | the same model as graft, graph-RRF with the citation channel, the facet fusion's first `CITATION_KEEP` kept first (`graft query`'s default) | likewise |
| graft-text | n/a: the text channel is for papers outside the corpus (in corpus it is graft-cite) | graft-cite with the text channel: the query's nearest papers by title + abstract as a run of weight W_t (`graft query --text`'s default) |

The citation channel fuses a fifth run with the facet lists: the papers that cite or are cited by the
first results of the facet fusion. The text channel (out of corpus) fuses the query's nearest corpus
papers by title + abstract as a run of its own. Their hits carry no facet credit for them, so the
attribution suite counts the facets the others credit; `teacher` and `graft` are the design's,
without them.

Out-of-corpus queries never carry their references: `ExternalScorer.rows` scores bibliographic
coupling only from a record's `references`, and the records built here have none, so every
out-of-corpus system sees the query's text alone; the teacher's rows fill their citation half with
text coupling (the clipped title + abstract cosine with the query's nearest corpus papers,
`graft.external.text_coupling_row`). Their facet items and edge rows are extracted once, in batches, and kept
in `SPLITDIR/ooc/facets.jsonl` (`eval.ooc_facets`), so the generative systems, the teacher walks and
the attribution checks of later runs read them without the sentence encoder.

The generative systems decode the facet items of several queries in shared `generate` calls, and
`graft`, `graft-rrf`, `graft-walk`, `graft-cite` and `graft-text` (one model, five fusions) decode each
query once.

A system returns a `SystemRun`: the ranked list per query and, for facet-attributed systems, the
credited facets of each hit with the hops of the evidence (1 = direct edge, 2 = through a neighbour).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graft.errors import GraftError
from graft.fusion import CITATION, CITATION_KEEP, CITATION_WEIGHT, TEXT_WEIGHT
from graft.index import Index
from graft.progress import Reporter
from graft.results import QueryResult
from graft.text import paper_text, paper_texts

if TYPE_CHECKING:
    from eval.ooc_facets import OocEntry

#: Every retrieval system name `graft eval run --systems` accepts, in table order.
SYSTEMS = ("bm25", "dense", "hybrid", "citation", "facet", "teacher", "teacher-fb", "teacher-cite", "graft", "graft-rrf",
           "graft-walk", "graft-naive", "graft-cite", "graft-text")
#: The survey suite's writers (`eval.survey_suite`), which `--systems` accepts beside the retrievers.
SURVEY_SYSTEMS = ("graft-survey", "baseline-survey")
#: Systems whose hits carry facet credits (the attribution suite).
ATTRIBUTED = ("facet", "teacher", "teacher-fb", "teacher-cite", "graft", "graft-rrf", "graft-walk", "graft-naive",
              "graft-cite", "graft-text")
#: The generative systems' fusions: (fusion, citation channel weight W, text channel weight W_t).
GENERATIVE = {"graft": ("graph-rrf", 0.0, 0.0), "graft-rrf": ("rrf", 0.0, 0.0), "graft-walk": ("graph-walk", 0.0, 0.0),
              "graft-naive": ("graph-rrf", 0.0, 0.0), "graft-cite": ("graph-rrf", CITATION_WEIGHT, 0.0),
              "graft-text": ("graph-rrf", CITATION_WEIGHT, TEXT_WEIGHT)}
#: Ranked results kept per query (R@50 needs 50; the rest lets a run be re-scored deeper).
DEPTH = 100
#: out-of-corpus queries whose facets and rows are made, and written to the cache, together
OOC_CHUNK = 100


class NotApplicable(GraftError):
    """The system cannot answer this kind of query (the reason goes into the table's notes)."""


@dataclass
class EvalQuery:
    """One query: a corpus paper (in corpus) or a held-out paper's text (out of corpus)."""

    qid: str
    paper_id: str
    in_corpus: bool
    title: str = ""
    abstract: str = ""

    @property
    def text(self) -> str:
        return paper_text(self.title, self.abstract)

    def record(self) -> dict[str, Any]:
        """The query as a paper record with no references (no access to the gold)."""
        return {"id": self.paper_id, "title": self.title, "abstract": self.abstract}


@dataclass
class SystemRun:
    """A system's answers: qid -> [(paper_id, score)] best first; qid -> [(paper_id, {facet: hops})]."""

    run: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    credits: dict[str, list[tuple[str, dict[str, int]]]] | None = None
    # qid -> per hit, the facets its label names (`graft.results.standout_facets`), in rank order
    labels: dict[str, list[list[str]]] | None = None


def _record(out: SystemRun, qid: str, result: QueryResult) -> None:
    """Store a query's hits in `out`: the ranking, each hit's facet credits {facet: hops} and the
    facets its label names (`Hit.stands_out`)."""
    out.run[qid] = [(h.paper_id, float(h.score)) for h in result.hits]
    out.credits[qid] = [(h.paper_id, {f: (h.evidence[f].hops if f in h.evidence else 1) for f in h.facets})
                        for h in result.hits]
    out.labels[qid] = [h.stands_out() for h in result.hits]


def facet_only_graphs(index: Index) -> dict[str, sp.csr_matrix]:
    """The four facet graphs of an index rebuilt from its items (and their lexical rows, where the
    build blended them in) with beta = 0 (no citation term), same top-K and candidate settings as
    its build."""
    from graft.citations import citation_signals
    from graphbuild.build import BuildConfig, facet_graphs

    config = BuildConfig.from_manifest(index.manifest)
    a = index.citation_matrix
    params = replace(config.graph_params(), alpha=1.0, beta=0.0)
    return facet_graphs(index.item_rows, index.facets["facet"].to_numpy(),
                        np.asarray(index.item_embeddings, dtype=np.float32), a,
                        citation_signals(a, config.citation_rescale, partners=config.citation_partners), params,
                        lexical=index.lexical or None)


class EvalContext:
    """Shared, lazily built resources of one index: encoder, out-of-corpus rows, baselines' indexes.

    Args:
        index: the evaluated index (built from the split's reduced corpus).
        encoder: a `graft.encoder.Encoder` (loaded on first use when None).
        naive_index: an index of the same corpus holding a model trained on naive pairs.
        beams: beams per facet item for the generative systems.
        device: where generative models run.
        split_dir: the split; out-of-corpus facets and rows are then kept in
            `SPLITDIR/ooc/facets.jsonl` (`eval.ooc_facets`) and read from there by later runs.
        decode_batch: facet items per `generate` call of the generative systems (items of
            several queries share a call).
        deadline: a `time.monotonic()` value after which the generative systems stop and report
            themselves not applicable (a time budget; no partial run is written).
    """

    def __init__(self, index: Index, *, encoder: Any = None, naive_index: Index | None = None,
                 beams: int = 20, device: str = "cpu", split_dir: str | Path | None = None,
                 decode_batch: int = 64, deadline: float | None = None) -> None:
        self.index = index
        self._encoder = encoder
        self.naive_index = naive_index
        self.beams = beams
        self.device = device
        self.split_dir = Path(split_dir) if split_dir is not None else None
        self.decode_batch = max(1, decode_batch)
        self.deadline = deadline
        self._ooc: dict[str, OocEntry] = {}
        # (index path, qid) -> decoded facet lists, kept for the other fusions of the same model
        self._lists: dict[tuple[str, str], dict[str, dict[str, float]]] = {}

    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            from graft.encoder import index_encoder

            self._encoder = index_encoder(self.index)
        return self._encoder

    @cached_property
    def texts(self) -> list[str]:
        return paper_texts(self.index.papers)

    @cached_property
    def paper_vectors(self) -> np.ndarray:
        """Title + abstract embeddings of the corpus: the build's `embeddings/papers.npy`, or encoded
        here for an index built before it wrote them."""
        stored = self.index.paper_embeddings
        return np.asarray(stored if stored is not None else self.encoder.encode(self.texts), dtype=np.float32)

    @cached_property
    def scorer(self) -> Any:
        from graft.external import ExternalScorer

        return ExternalScorer(self.index, encoder=self.encoder)

    @cached_property
    def corpus_scorer(self) -> Any:
        """Corpus papers' rows with the feedback pass (no encoder needed)."""
        from graft.external import FEEDBACK, CorpusScorer

        return CorpusScorer(self.index, feedback=FEEDBACK)

    @cached_property
    def ooc_key(self) -> dict[str, Any]:
        """What cached out-of-corpus entries must have been made with (`eval.ooc_facets.default_key`)."""
        from eval.ooc_facets import default_key

        return default_key(self.index.manifest, getattr(self._encoder, "name", None))

    def prepare_ooc(self, queries: list[EvalQuery], reporter: Reporter | None = None) -> None:
        """Facet items and edge rows of out-of-corpus queries: read from `SPLITDIR/ooc/facets.jsonl`
        where it holds them (same key and query text), else extracted in batches and written there.

        Args:
            queries: any queries (in-corpus ones are skipped).
            reporter: progress of the extraction.
        Raises:
            GraftError: an unreadable cache file; the encoder cannot be loaded when entries are missing.
        """
        from eval.ooc_facets import OocEntry, cache_path, read_cache, text_sha, write_cache

        todo = [q for q in queries if not q.in_corpus and q.qid not in self._ooc]
        if not todo:
            return
        path = cache_path(self.split_dir) if self.split_dir is not None else None
        cached = (read_cache(path, self.ooc_key, self.index.n) if path is not None else None) or {}
        found = {q.qid: cached[q.qid] for q in todo
                 if q.qid in cached and cached[q.qid].text_sha == text_sha(q.title, q.abstract)}
        missing = [q for q in todo if q.qid not in found]
        if missing:
            reporter = reporter or Reporter(quiet=True)
            with reporter.stage("ooc facets", total=len(missing), unit="queries") as advance:
                # in chunks, each written to the cache as it is done: a stopped run loses one chunk
                for start in range(0, len(missing), OOC_CHUNK):
                    chunk = missing[start : start + OOC_CHUNK]
                    records = [q.record() for q in chunk]
                    built = self.scorer.score_many(records, progress=advance, facet_only=True)
                    near = self.neighbour_rows(records)
                    new = {q.qid: OocEntry(dict(facets), rows, text_sha(q.title, q.abstract), facet_only, coupling)
                           for q, (rows, facets, facet_only), coupling in zip(chunk, built, near)}
                    cached.update(new)
                    found.update(new)
                    if path is not None:
                        write_cache(path, self.ooc_key, cached)
        self._ooc.update(found)

    def neighbour_rows(self, records: list[dict[str, Any]]) -> list[sp.csr_matrix]:
        """Text coupling rows (1 x n) of records: each one's nearest corpus papers by title +
        abstract with their cosines (M = the cache key's `text_neighbours`; empty rows when 0)."""
        m = int(self.ooc_key["text_neighbours"])
        if not m:
            return [sp.csr_matrix((1, self.index.n), dtype=np.float32) for _ in records]
        return self.scorer.facets_of.coupling_rows(records, m)

    def ooc_neighbours(self, q: EvalQuery) -> dict[str, float]:
        """An out-of-corpus query's nearest corpus papers by title + abstract (paper id -> cosine),
        for the generative retriever's text channel."""
        from graft.external import neighbour_ids

        if q.qid not in self._ooc:
            self.prepare_ooc([q])
        return neighbour_ids(self._ooc[q.qid].neighbours, self.index.paper_ids)

    def ooc_rows(self, q: EvalQuery) -> tuple[dict[str, sp.csr_matrix], dict[str, list[str]]]:
        """Facet edge rows and extracted facets of an out-of-corpus query, from its text alone
        (`prepare_ooc` fetches many at once)."""
        if q.qid not in self._ooc:
            self.prepare_ooc([q])
        entry = self._ooc[q.qid]
        return entry.rows, entry.facets

    def ooc_facet_only_rows(self, q: EvalQuery) -> dict[str, sp.csr_matrix]:
        """An out-of-corpus query's edge rows under facet-only weights (alpha 1, beta 0), for the
        facet-only baseline."""
        if q.qid not in self._ooc:
            self.prepare_ooc([q])
        return self._ooc[q.qid].facet_only_rows

    def decoded(self, index: Index, queries: list[EvalQuery]) -> bool:
        """Whether every query's lists under the index's model are decoded already (`facet_lists`)."""
        return all((str(index.path), q.qid) in self._lists for q in queries)

    def facet_lists(self, index: Index, queries: list[EvalQuery]) -> list[dict[str, dict[str, float]]]:
        """Decoded facet lists of queries under an index's model, decoded together; each query's
        lists are kept for the other fusions of the same model (graft, graft-rrf and graft-walk
        decode once; a few KiB per query)."""
        gen = index.generative(device=self.device)
        keys = [(str(index.path), q.qid) for q in queries]
        have = {k: self._lists[k] for k in keys if k in self._lists}
        todo = [(k, q) for k, q in zip(keys, queries) if k not in have]
        if todo:
            specs = [(index.paper_facets(q.paper_id), {q.paper_id}) if q.in_corpus else (self.ooc_rows(q)[1], set())
                     for _, q in todo]
            for (k, _), lists in zip(todo, gen.facet_lists(specs, self.beams, batch_size=self.decode_batch)):
                have[k] = self._lists[k] = lists
        return [have[k] for k in keys]

    @cached_property
    def walk(self) -> dict[str, sp.csr_matrix]:
        from graft.teacher import symmetrise

        return symmetrise(self.index.graphs)

    def supported(self, q: EvalQuery, facet: str, paper_id: str) -> bool:
        """Does the facet graph hold an edge between the query and the paper (either direction)?"""
        c = self.index.row_of[paper_id]
        if q.in_corpus:
            return bool(self.walk[facet][self.index.row_of[q.paper_id], c] > 0)
        return bool(self.ooc_rows(q)[0][facet][0, c] > 0)

    @cached_property
    def facet_only_graphs(self) -> dict[str, sp.csr_matrix]:
        return facet_only_graphs(self.index)

    @cached_property
    def facet_similarity(self) -> Any:
        from eval.metrics import FacetSimilarity

        idx = self.index
        return FacetSimilarity(idx.item_rows, idx.facets["facet"].to_numpy(),
                               np.asarray(idx.item_embeddings, dtype=np.float32), idx.n)

    def obvious(self, q: EvalQuery, m: int) -> set[str]:
        """The query's m nearest papers by facet similarity (eval.metrics), the query excluded."""
        from graft.facets import FACETS

        idx = self.index
        if q.in_corpus:
            node = idx.row_of[q.paper_id]
            fcol = idx.facets["facet"].to_numpy()
            mine = idx.item_rows == node
            vecs = np.asarray(idx.item_embeddings, dtype=np.float32)
            items = {f: vecs[mine & (fcol == f)] for f in FACETS}
            near = self.facet_similarity.nearest(items, m, exclude=[node])
        else:
            facets = self.ooc_rows(q)[1]
            items = self.scorer.embed_items([q.record()], [{f: list(facets.get(f, [])) for f in FACETS}])[0]
            near = self.facet_similarity.nearest(items, m)
        return {idx.paper_ids[i] for i in near}


# ---- the systems ---------------------------------------------------------------------------------
def _bm25(ctx: EvalContext, queries: list[EvalQuery], advance: Callable[[int], None]) -> SystemRun:
    try:
        import bm25s
    except ImportError:  # pragma: no cover - a declared dependency
        raise GraftError("the bm25 system needs the `bm25s` package: pip install bm25s") from None
    idx = ctx.index
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(ctx.texts, stopwords="en", show_progress=False), show_progress=False)
    out = SystemRun()
    texts = [ctx.texts[idx.row_of[q.paper_id]] if q.in_corpus else q.text for q in queries]
    tokens = bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)
    depth = min(DEPTH + 1, idx.n)
    for q, toks in zip(queries, tokens):
        if not toks:
            out.run[q.qid] = []
            advance(1)
            continue
        docs, scores = retriever.retrieve([toks], k=depth, show_progress=False, n_threads=1)
        ranked = [(idx.paper_ids[int(d)], float(s)) for d, s in zip(docs[0], scores[0])
                  if s > 0 and not (q.in_corpus and idx.paper_ids[int(d)] == q.paper_id)]
        out.run[q.qid] = ranked[:DEPTH]
        advance(1)
    return out


def _dense_scores(ctx: EvalContext, queries: list[EvalQuery]) -> Iterator[tuple[EvalQuery, int | None, np.ndarray]]:
    """Each query with its corpus row (None out of corpus) and its MiniLM cosines with every paper
    (the out-of-corpus queries' texts embedded in one encoder call)."""
    idx = ctx.index
    x = ctx.paper_vectors
    ooc = [q for q in queries if not q.in_corpus]
    qvec = dict(zip([q.qid for q in ooc], ctx.encoder.encode([q.text for q in ooc]))) if ooc else {}
    for q in queries:
        node = idx.row_of[q.paper_id] if q.in_corpus else None
        yield q, node, x @ (x[node] if node is not None else qvec[q.qid])


def _dense(ctx: EvalContext, queries: list[EvalQuery], advance: Callable[[int], None]) -> SystemRun:
    out = SystemRun()
    for q, node, scores in _dense_scores(ctx, queries):
        out.run[q.qid] = _best(ctx.index, scores, node)
        advance(1)
    return out


def _best(idx: Index, scores: np.ndarray, node: int | None) -> list[tuple[str, float]]:
    """The `DEPTH` best papers by `scores` (ties by row), the query's own row `node` left out."""
    s = np.asarray(scores, dtype=np.float64).copy()
    if node is not None:
        s[node] = -np.inf
    order = np.lexsort((np.arange(idx.n), -s))[:DEPTH]
    return [(idx.paper_ids[i], float(s[i])) for i in order if np.isfinite(s[i])]


def _hybrid(ctx: EvalContext, queries: list[EvalQuery], advance: Callable[[int], None]) -> SystemRun:
    from graft.lexical import TEXT_LEXICAL_WEIGHT, Lexicon, blend

    lexicon = Lexicon.fit(ctx.texts)  # the corpus's own, whatever the build's settings
    words = lexicon.vectors(ctx.texts)
    ooc = [q for q in queries if not q.in_corpus]
    qwords = lexicon.vectors([q.text for q in ooc])
    qrow = {q.qid: qwords[i] for i, q in enumerate(ooc)}
    out = SystemRun()
    for q, node, scores in _dense_scores(ctx, queries):
        mine = words[node] if node is not None else qrow[q.qid]
        out.run[q.qid] = _best(ctx.index, blend(scores, (words @ mine.T).toarray().ravel(), TEXT_LEXICAL_WEIGHT),
                               node)
        advance(1)
    return out


def _citation(ctx: EvalContext, queries: list[EvalQuery], advance: Callable[[int], None]) -> SystemRun:
    if any(not q.in_corpus for q in queries):
        raise NotApplicable("citation-only is n/a out of corpus: a held-out paper's only citation links "
                            "to the corpus are its references, which are the gold")
    idx = ctx.index
    cite = idx.citation_score
    out = SystemRun()
    for q in queries:
        node = idx.row_of[q.paper_id]
        row = cite[node]
        keep = row.indices != node
        cols, vals = row.indices[keep], row.data[keep]
        order = np.lexsort((cols, -vals))[:DEPTH]
        out.run[q.qid] = [(idx.paper_ids[int(cols[i])], float(vals[i])) for i in order if vals[i] > 0]
        advance(1)
    if queries and not any(out.run.values()):
        raise NotApplicable("citation-only has nothing to rank: the index holds none of the queries' citation "
                            "links (leak-free, they are the gold), so their coupling and co-citation rows are empty")
    return out


def _searcher(index: Index, **settings: Any) -> Any:
    """The query front door of `index` asking for `DEPTH` results under `settings`
    (`graft.query.QueryConfig` fields)."""
    from graft.query import QueryConfig, Searcher

    return Searcher(index, QueryConfig(k=DEPTH, **settings))


def _teacher_over(ctx: EvalContext, graphs: dict[str, sp.csr_matrix] | None, queries: list[EvalQuery],
                  advance: Callable[[int], None], *, feedback: bool = False,
                  citation_weight: float = 0.0, citation_keep: int = 0) -> SystemRun:
    """The graph teacher's walks over the index's graphs (None; through the query front door,
    `graft.query.Searcher.rows`), or over facet-only `graphs` from the out-of-corpus queries'
    facet-only rows; with `feedback`, a corpus paper's walk starts from its rows with the feedback
    pass instead of its stored rows; `citation_weight` W > 0 adds the citation channel to the
    index's teacher (its hits credit no facet for it), keeping the facet fusion's first
    `citation_keep` results first."""
    from graft.results import standout_facets
    from graft.teacher import GraphTeacher

    idx = ctx.index
    out = SystemRun(credits={}, labels={})
    if graphs is not None:
        teacher = GraphTeacher(graphs, ids=idx.paper_ids)
        for q in queries:
            if q.in_corpus:
                node = idx.row_of[q.paper_id]
                fused, per_facet = teacher.retrieve(teacher.node_rows(node), exclude={node}, k=DEPTH)
            else:
                fused, per_facet = teacher.retrieve(ctx.ooc_facet_only_rows(q), k=DEPTH)
            out.run[q.qid] = [(idx.paper_ids[node], float(score)) for node, score, _ in fused]
            found = [{f: per_facet[f][node] for f in terms if f != CITATION} for node, _, terms in fused]
            hops = [{f: c.hops for f, c in cands.items()} for cands in found]
            out.credits[q.qid] = [(idx.paper_ids[node], h) for (node, _, _), h in zip(fused, hops)]
            out.labels[q.qid] = [standout_facets({f: c.weight for f, c in cands.items()}, h)
                                 for cands, h in zip(found, hops)]
            advance(1)
        return out
    searcher = _searcher(idx, retriever="teacher", citation_weight=citation_weight, citation_keep=citation_keep)
    for q in queries:
        if q.in_corpus:
            node = idx.row_of[q.paper_id]
            rows = ctx.corpus_scorer.walk_rows(node) if feedback else idx.teacher().node_rows(node)
            result = searcher.rows(rows, query_id=q.qid, exclude={node})
        else:
            result = searcher.rows(ctx.ooc_rows(q)[0], query_id=q.qid)
        _record(out, q.qid, result)
        advance(1)
    return out


def _generative(ctx: EvalContext, index: Index, fusion: str, queries: list[EvalQuery],
                advance: Callable[[int], None], citation_weight: float = 0.0, text_weight: float = 0.0,
                citation_keep: int = 0) -> SystemRun:
    from graft.manifest import has_model

    if text_weight > 0 and any(q.in_corpus for q in queries):
        raise NotApplicable("the text channel is for papers outside the corpus: in corpus this system is graft-cite")
    if not has_model(index.path):
        raise NotApplicable(f"no trained model in {index.path / 'model'}; train one with "
                            f"`graft train {index.path}`")
    searcher = _searcher(index, retriever="graft", fusion=fusion, beams=ctx.beams, device=ctx.device,
                         citation_weight=citation_weight, text_weight=text_weight, citation_keep=citation_keep)
    out = SystemRun(credits={}, labels={})
    step = max(1, ctx.decode_batch // 2)  # queries per decoding round: a few generate calls of items
    for start in range(0, len(queries), step):
        chunk = queries[start : start + step]
        # past the budget only new decoding stops: a fusion of lists decoded for another system of
        # the same model takes about a second for all its queries
        if ctx.deadline is not None and time.monotonic() > ctx.deadline and not ctx.decoded(index, chunk):
            raise NotApplicable(f"stopped by the time budget after {start} of {len(queries)} queries "
                                f"(no run written)")
        for q, lists in zip(chunk, ctx.facet_lists(index, chunk)):
            if q.in_corpus:
                result = searcher.fuse(q.paper_id, lists)
            else:
                near = ctx.ooc_neighbours(q) if text_weight > 0 else None
                result = searcher.fuse({"id": q.qid}, lists, neighbours=near)
            _record(out, q.qid, result)
        advance(len(chunk))
    return out


def run_system(name: str, ctx: EvalContext, queries: list[EvalQuery], reporter: Reporter | None = None) -> SystemRun:
    """Answer every query with one system.

    Args:
        name: one of `SYSTEMS`.
        ctx: the evaluated index and its shared resources.
        queries: all in corpus or all out of corpus.
        reporter: progress (one stage per system).
    Returns:
        The system's run (and facet credits for attributed systems).
    Raises:
        NotApplicable: the system does not apply (citation out of corpus; graft without a model;
            graft-naive without `naive_index`).
        GraftError: unknown system name.
    """
    if name not in SYSTEMS:
        raise GraftError(f"unknown system {name!r}; allowed: {', '.join(SYSTEMS)}")
    if name == "teacher-fb" and any(not q.in_corpus for q in queries):
        raise NotApplicable("out of corpus the teacher's rows already have the feedback pass (the teacher row)")
    if name == "graft-naive" and ctx.naive_index is None:
        raise NotApplicable("graft-naive needs an index holding a model trained with --sampling naive "
                            "(pass --naive-index DIR)")
    reporter = reporter or Reporter(quiet=True)
    with reporter.stage(name, total=len(queries), unit="queries") as advance:
        if name == "bm25":
            return _bm25(ctx, queries, advance)
        if name == "dense":
            return _dense(ctx, queries, advance)
        if name == "hybrid":
            return _hybrid(ctx, queries, advance)
        if name == "citation":
            return _citation(ctx, queries, advance)
        if name == "facet":
            return _teacher_over(ctx, ctx.facet_only_graphs, queries, advance)
        if name == "teacher":
            return _teacher_over(ctx, None, queries, advance)
        if name == "teacher-fb":
            return _teacher_over(ctx, None, queries, advance, feedback=True)
        if name == "teacher-cite":
            return _teacher_over(ctx, None, queries, advance, citation_weight=CITATION_WEIGHT,
                                 citation_keep=CITATION_KEEP)
        fusion, weight, text_weight = GENERATIVE[name]
        index = ctx.naive_index if name == "graft-naive" else ctx.index
        return _generative(ctx, index, fusion, queries, advance, citation_weight=weight, text_weight=text_weight,
                           citation_keep=CITATION_KEEP if weight > 0 else 0)
