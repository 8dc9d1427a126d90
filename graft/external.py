"""Edge rows for a paper outside the corpus, scored exactly as corpus rows are at build time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.ann import IVFCandidates
from graft.build_config import BuildConfig
from graft.citations import TEXT_NEIGHBOURS, external_citation_row, text_coupling_row
from graft.edges import GraphParams, external_facet_row
from graft.encoder import embed_items
from graft.errors import IndexFormatError, InputValidationError
from graft.facets import FACETS, FacetItems
from graft.fusion import CITATION_WEIGHT
from graft.lexical import facet_rows_of
from graft.results import QueryResult
from graft.similarity import GatheredItems, group_items
from graft.teacher import TeacherConfig
from graft.text import paper_text

if TYPE_CHECKING:
    from graft.index import Index

#: A paper outside the corpus is scored twice: the citation links of the R papers its first rows rank
#: highest (the share of them that a paper cites or is cited by) are added to its citation half
#: (pseudo-relevance feedback through citations; 0 = one pass). Chosen on cs768's dev papers posed as
#: text-only queries (docs/results/text_coupling_cs768.md); it also lifts records with 1, 2 or 5 known
#: references (known_references_cs768.md) and in-corpus dev papers (incorpus_feedback_cs768.md), though
#: these do better with the citation channel on their stored rows (citation_channel_cs768.md).
FEEDBACK = 3

#: Papers outside the corpus taken apart per pass when many are scored at once (`rows_many`,
#: `graft query --queries`): their facets extracted and embedded in shared encoder batches.
RECORD_CHUNK = 256


def neighbour_ids(row: sp.csr_matrix, paper_ids: list[str]) -> dict[str, float]:
    """A text coupling row (1 x n) as paper id -> cosine, the form the text channel takes
    (`graft.candidates.CandidateFusion.fuse_items`)."""
    return {paper_ids[int(c)]: float(v) for c, v in zip(row.indices, row.data)}


def _without(row: sp.csr_matrix, node: int | None) -> sp.csr_matrix:
    """A float32 copy of a 1 x n row with column `node` removed (None: the row as it is, as float32)."""
    row = sp.csr_matrix(row, dtype=np.float32, copy=True)
    if node is not None:  # a corpus paper posed as a record: not its own neighbour
        row.data[row.indices == node] = 0
        row.eliminate_zeros()
    return row


class RecordFacets:
    """Facet items of papers outside the corpus, extracted as the index's build did: the offline
    heuristic extractor with the index's embedding model (loaded once)."""

    def __init__(self, index: Index, *, encoder: Any = None, extractor: Any = None) -> None:
        self.config = BuildConfig.from_manifest(index.manifest)
        if encoder is None:
            from graft.encoder import index_encoder

            encoder = index_encoder(index)
        if extractor is None:
            from graft.extract import HeuristicFacetExtractor

            extractor = HeuristicFacetExtractor(encoder, self.config.heuristic_config())
        self.index = index
        self.encoder = encoder
        self.extractor = extractor

    def __call__(self, record: dict[str, Any]) -> FacetItems:
        return self.many([record])[0]

    @cached_property
    def paper_vectors(self) -> np.ndarray | None:
        """The corpus's title + abstract embeddings as float32 (read once), or None for an index
        built before `embeddings/papers.npy`."""
        papers = self.index.paper_embeddings
        return None if papers is None else np.asarray(papers, dtype=np.float32)

    def text_vectors(self, records: list[dict[str, Any]]) -> np.ndarray:
        """Title + abstract embeddings of the records (unit rows), made as the build made the
        corpus's `embeddings/papers.npy`, in one encoder call."""
        texts = [paper_text(rec.get("title"), rec.get("abstract")) for rec in records]
        return np.asarray(self.encoder.encode(texts), dtype=np.float32).reshape(len(records), -1)

    def coupling_rows(self, records: list[dict[str, Any]], m: int = TEXT_NEIGHBOURS) -> list[sp.csr_matrix]:
        """Each record's text coupling row (1 x n, `text_coupling_row`): the cosine of its title +
        abstract with its `m` nearest corpus papers, clipped to [0, 1]; a record whose id is a corpus
        paper is not its own neighbour. All records' texts go through one encoder call.

        Raises:
            IndexFormatError: the index predates `embeddings/papers.npy`.
        """
        papers = self.paper_vectors
        if papers is None:
            raise IndexFormatError(f"index '{self.index.path}' has no embeddings/papers.npy, which the text "
                                   "channel needs: rebuild it with `graft build` (or pass --text-neighbours 0)")
        if m <= 0 or not records:
            return [sp.csr_matrix((1, self.index.n), dtype=np.float32) for _ in records]
        row_of = self.index.row_of
        weight = self.config.text_lexical_weight
        if "papers" not in self.index.lexical or weight <= 0 or self.index.lexicon is None:
            sims = [None] * len(records)
        else:  # the records' title + abstract lexical rows, as the build made the corpus's, against every paper's
            rows = self.index.lexicon.vectors([paper_text(rec.get("title"), rec.get("abstract")) for rec in records])
            sims = [self.index.lexical_cosines(rows[i]) for i in range(len(records))]
        return [text_coupling_row(papers, vec, m, exclude=row_of.get(str(rec.get("id"))), lexical_weight=weight,
                                  lexical_sims=s)
                for rec, vec, s in zip(records, self.text_vectors(records), sims)]

    def neighbours(self, records: list[dict[str, Any]], m: int = TEXT_NEIGHBOURS) -> list[dict[str, float]]:
        """Each record's `m` nearest corpus papers by title + abstract (paper id -> cosine, from
        `coupling_rows`): the generative retriever's text channel (`graft.fusion.TEXT`).

        Raises:
            IndexFormatError: the index predates `embeddings/papers.npy`.
        """
        return [neighbour_ids(row, self.index.paper_ids) for row in self.coupling_rows(records, m)]

    def many(self, records: list[dict[str, Any]]) -> list[FacetItems]:
        """Facet items of several records, extracted as one table (the extractor embeds the
        candidate sentences of all of them in shared encoder batches).

        Args:
            records: paper records with `title` and `abstract` (optional `id`, `full_text`).
        Returns:
            one `FacetItems` per record, in order.
        """
        if not records:
            return []
        table = pl.DataFrame([{
            "paper_id": str(record.get("id") or "query"),
            "title": str(record.get("title") or ""),
            "abstract": str(record.get("abstract") or ""),
            "full_text": record.get("full_text"),
        } for record in records], schema={"paper_id": pl.Utf8, "title": pl.Utf8, "abstract": pl.Utf8,
                                          "full_text": pl.Utf8})
        return self.extractor.extract(table)


class CorpusScorer:
    """Edge rows scored as the build scores them, from the index alone (no sentence encoder): a
    corpus paper's rows from its own item vectors (`paper_rows`), the feedback pass for corpus
    papers (`feedback_rows`), and `graft query --paper`'s teacher (`query_paper`).

    The feedback pass: the citation links of the R papers the graph teacher ranks highest for a paper
    (the share of them that a corpus paper cites or is cited by) raise the citation half of its rows,
    and its rows are scored again. The query paper's own links are never used. On cs768's in-corpus
    dev queries it lifted the teacher's R@20 from 0.328 to 0.399 with R = 3
    (`experiments/incorpus_feedback.py`), but the citation channel on the stored rows does
    better still (`docs/results/citation_channel_cs768.md`), so corpus papers are walked from their
    stored rows by default (R = 0). The stored graph, which the generative retriever is trained on,
    is not changed by either.

    Args:
        index: the opened index.
        feedback: R of the feedback pass (default 0 = off: the stored rows).
        citation_weight: W of the citation channel of the teacher's fusion (default
            `graft.fusion.CITATION_WEIGHT`; 0 = off); the index's citation links make it.
    """

    def __init__(self, index: Index, *, feedback: int = 0, citation_weight: float = CITATION_WEIGHT,
                 teacher: TeacherConfig | None = None) -> None:
        if feedback < 0:
            raise InputValidationError(f"feedback must be >= 0, got {feedback}")
        if citation_weight < 0:
            raise InputValidationError(f"citation_weight must be >= 0, got {citation_weight}")
        self.feedback = feedback
        #: the walk's settings (`graft.query.QueryConfig.teacher_config`); its W wins over `citation_weight`
        self.walk_config = teacher or TeacherConfig(citation_weight=float(citation_weight))
        self.citation_weight = float(self.walk_config.citation_weight)
        self.index = index
        self.config = BuildConfig.from_manifest(index.manifest)
        self.params: GraphParams = self.config.graph_params()

    @cached_property
    def linked(self) -> sp.csr_matrix:
        """1 where a corpus paper cites or is cited by another (`Index.citation_links`)."""
        return self.index.citation_links

    @cached_property
    def items(self) -> dict[str, GatheredItems]:
        """Per facet, the corpus's items grouped by paper as the build scores them, gathered from the
        memory-mapped item vectors for the candidates a query scores (`Index.item_groups`)."""
        vectors = self.index.item_embeddings
        lexical = self.index.lexical if self.params.lexical_weight > 0 else {}
        return {f: GatheredItems(vectors, *self.index.item_groups[f], lexical=lexical.get(f)) for f in FACETS}

    @property
    def lexical_on(self) -> bool:
        """Whether facet similarity blends in lexical rows (`graft.lexical`): the build's lexical
        weight is above 0 and the index holds the rows."""
        return self.params.lexical_weight > 0 and all(f in self.index.lexical for f in FACETS)

    @cached_property
    def searchers(self) -> dict[str, IVFCandidates | None]:
        """Per facet, the build's IVF index (`graph/ann_{facet}.faiss`, made again from the items
        where the file is missing), or None where the build searched exactly: a paper outside the
        corpus gets its candidates as corpus papers got theirs (from the same IVF index with
        "faiss"; from it in place of the build's HNSW graph with "hnsw", `graft.ann`)."""
        search = self.params.candidates
        if search.resolve(self.index.n) == "exact":
            return dict.fromkeys(FACETS)
        out: dict[str, IVFCandidates | None] = {}
        for facet in FACETS:
            path = self.index.path / "graph" / f"ann_{facet}.faiss"
            out[facet] = (IVFCandidates.read(path, None, search, n=self.index.n) if path.is_file()
                          else IVFCandidates(self.items[facet].pooled, search))
        return out

    @property
    def teacher_config(self) -> TeacherConfig:
        """The graph teacher's settings of this scorer's queries: the citation channel at W when
        the index has citation links, off otherwise."""
        return replace(self.walk_config, citation_weight=self.citation_weight if self.linked.nnz else 0.0)

    def query_rows(self, rows: dict[str, sp.csr_matrix], *, query_id: str = "query", k: int = 20,
                   exclude: set[int] | None = None) -> QueryResult:
        """The graph teacher's answer for facet rows (`Index.query_rows`) under `teacher_config`;
        `info["citation_weight"]` says the W used."""
        config = self.teacher_config
        result = self.index.query_rows(rows, query_id=query_id, k=k, exclude=exclude, config=config)
        result.info["citation_weight"] = config.citation_weight
        return result

    def link_share(self, papers: np.ndarray) -> sp.csr_matrix:
        """1 x n: per corpus paper, the share of `papers` (corpus rows) that it cites or is cited by."""
        return sp.csr_matrix(self.linked[np.asarray(papers, dtype=np.int64)].mean(axis=0), dtype=np.float32)

    def raised(self, cite: sp.csr_matrix, first: list[int], own: int | None = None) -> sp.csr_matrix:
        """The feedback pass's citation row: `cite` raised, per paper, to its `link_share` of the
        papers `first` (unchanged when `first` is empty), column `own` left out (the query paper)."""
        if not len(first):
            return cite
        return _without(cite.maximum(self.link_share(np.asarray(first, dtype=np.int64))), own)

    def rows_from(self, cite: sp.csr_matrix, vectors: dict[str, np.ndarray],
                  params: GraphParams | None = None, lexical: dict[str, sp.csr_matrix] | None = None,
                  ) -> dict[str, sp.csr_matrix]:
        """Edge rows (1 x n per facet) from a paper's citation score row and its facet items'
        vectors (`embed_items`, `own_vectors`) and lexical rows (`lexical_rows`, `own_lexical`; None:
        facet similarity from the vectors alone), under the index's graph settings unless `params` is given."""
        params = params or self.params
        rows = {}
        for facet in FACETS:
            query = group_items(np.zeros(len(vectors[facet]), dtype=np.int64), vectors[facet], 1)
            if lexical is not None:
                query.lexical = lexical[facet]
            rows[facet] = external_facet_row(query, self.items[facet], cite, params, self.searchers[facet])
        return rows

    def own_lexical(self, node: int) -> dict[str, sp.csr_matrix] | None:
        """A corpus paper's lexical rows per facet (1 x V each), or None where facet similarity has none."""
        return {f: self.index.lexical[f][node] for f in FACETS} if self.lexical_on else None

    def own_vectors(self, node: int) -> dict[str, np.ndarray]:
        """A corpus paper's facet items' vectors, per facet (as `embed_items` gives a new paper's)."""
        out = {}
        for facet in FACETS:
            indptr, rows = self.index.item_groups[facet]
            mine = np.sort(np.asarray(rows[indptr[node]:indptr[node + 1]], dtype=np.int64))  # in table order
            out[facet] = np.asarray(self.index.item_embeddings[mine], dtype=np.float32)
        return out

    def paper_rows(self, node: int, cite: sp.csr_matrix, params: GraphParams | None = None,
                   ) -> dict[str, sp.csr_matrix]:
        """A corpus paper's facet rows (1 x n each) scored again as a new paper's are: from its own
        item vectors and the citation row `cite` (`rows_from`, under `params` or the index's graph
        settings), with the paper itself left out of them."""
        params = params or self.params
        wider = replace(params, top_k=params.top_k + 1)  # room for the paper itself
        out = {}
        for facet, row in self.rows_from(cite, self.own_vectors(node), wider, self.own_lexical(node)).items():
            row = row.tocoo()
            keep = row.col != node
            cols, w = row.col[keep], row.data[keep]
            top = np.argsort(-w, kind="stable")[: params.top_k]
            out[facet] = sp.csr_matrix((w[top], (np.zeros(len(top), dtype=np.int64), cols[top])),
                                       shape=(1, self.index.n))
        return out

    def feedback_rows(self, node: int) -> dict[str, sp.csr_matrix]:
        """A corpus paper's facet rows with the feedback pass: the row its citation half was built from
        (`Index.citation_half`: coupling and co-citation, or text coupling for a paper without
        citation links) raised, per paper, to the share of the first `feedback` papers of its
        graph-teacher ranking (stored rows) that the paper cites or is cited by; the facet rows then
        scored again from its own items (`paper_rows`). With `feedback` 0: the rows scored again
        from the citation score row alone."""
        cite = self.index.citation_half(node)
        if self.feedback:
            hits = self.index.query_paper(self.index.paper_ids[node], k=self.feedback).hits
            cite = self.raised(cite, [self.index.row_of[h.paper_id] for h in hits], node)
        return self.paper_rows(node, cite)

    @property
    def passes(self) -> bool:
        """Whether the feedback pass can add anything: R > 0 and the index has citation links."""
        return bool(self.feedback) and bool(self.linked.nnz)

    def walk_rows(self, node: int) -> dict[str, sp.csr_matrix]:
        """The rows the teacher walks for a corpus paper: `feedback_rows` when the pass `passes`,
        else its stored rows (`GraphTeacher.node_rows`)."""
        return self.feedback_rows(node) if self.passes else self.index.teacher().node_rows(node)

    def query_paper(self, paper_id: str, *, k: int = 20) -> QueryResult:
        """Related papers of a corpus paper by the graph teacher walking its `walk_rows` (`query_rows`,
        with the citation channel): with R = 0 or an index without citation links the stored rows;
        `info["feedback"]` says which R was used. With R = 0 and W = 0, `Index.query_paper`."""
        node = self.index.row(paper_id)
        result = self.query_rows(self.walk_rows(node), query_id=paper_id, k=k, exclude={node})
        result.info["feedback"] = self.feedback if self.passes else 0
        return result


class ExternalScorer(CorpusScorer):
    """Scores new papers against an index: extracts facets, embeds items, builds top-K rows.

    A row's weight is alpha * s_f + beta * c, as in the graph. The citation score c of a new paper with
    a corpus paper is the largest of its bibliographic coupling through the new paper's `references`,
    the share of those references that cite or are cited by the corpus paper (citation links), and
    text coupling (`text_coupling_row`: the clipped title + abstract cosine with its `text_neighbours`
    nearest papers); see `citation_rows`. A paper with no references into the corpus gets text
    coupling alone, or c = 0 when `text_neighbours` is 0 or the index predates
    `embeddings/papers.npy` (`text_neighbours` is then 0 and `text_coupling_off` says why). Every
    paper is then scored a second time with the citation links of the `feedback` papers its first
    rows rank highest (its own references left out) added to that half (`with_feedback`). The maximum
    was chosen on out-of-corpus papers posed with 1, 2 or 5 known references
    (`experiments/known_references.py`), the second pass on dev papers posed as text-only queries
    (`experiments/text_coupling.py`) and checked on the papers with known references
    (R@20 +0.012 / +0.019 / +0.007 at k = 1 / 2 / 5).

    Args:
        index: the opened index.
        encoder / extractor: already loaded ones to reuse; built from the index's build config otherwise.
        text_neighbours: M of text coupling (default `TEXT_NEIGHBOURS`; 0 = off).
        feedback: R of the second pass (default `FEEDBACK`; 0 = off): the citation links of the R
            papers the first pass ranks highest join the citation half.
        citation_weight: W of the citation channel when its rows are walked (`query_rows`).
    """

    def __init__(self, index: Index, *, encoder: Any = None, extractor: Any = None,
                 text_neighbours: int = TEXT_NEIGHBOURS, feedback: int = FEEDBACK,
                 citation_weight: float = CITATION_WEIGHT, teacher: TeacherConfig | None = None) -> None:
        if text_neighbours < 0:
            raise InputValidationError(f"text_neighbours must be >= 0, got {text_neighbours}")
        super().__init__(index, feedback=feedback, citation_weight=citation_weight, teacher=teacher)
        self.facets_of = RecordFacets(index, encoder=encoder, extractor=extractor)
        self.encoder = self.facets_of.encoder
        self.coupling_row_log = index.coupling_row_log(self.config.citation_rescale)
        self.paper_vectors = self.facets_of.paper_vectors if text_neighbours > 0 else None
        #: M of text coupling in effect: 0 when switched off or the index has no paper embeddings
        self.text_neighbours = text_neighbours if self.paper_vectors is not None else 0
        #: why text-only papers get no text coupling, or None when they do
        self.text_coupling_off = (None if self.text_neighbours else
                                  "text_neighbours = 0" if text_neighbours == 0 else
                                  f"index '{index.path}' has no embeddings/papers.npy (rebuild it with "
                                  "`graft build` to add them)")

    def rows(self, record: dict[str, Any]) -> tuple[dict[str, sp.csr_matrix], FacetItems]:
        """Facet edge rows (1 x n each) of a new paper and the facet items they came from."""
        return self.rows_many([record])[0]

    def embed_items(self, records: list[dict[str, Any]], facets: list[FacetItems]) -> list[dict[str, np.ndarray]]:
        """Embeddings of new papers' facet items, made as the index's build made its own (each
        item with its paper's title vector at the build's `title_weight`; read inside the paper's
        title + abstract under item context "late"), in shared encoder batches.

        Args:
            records: the papers (their `title` is the items' context).
            facets: each paper's facet items (aligned with `records`).
        Returns:
            per paper, facet -> (items, d) unit rows.
        """
        items = [t for per in facets for f in FACETS for t in per[f]]
        titles = [str(rec.get("title") or "") for rec, per in zip(records, facets) for f in FACETS for _ in per[f]]
        texts = None
        if self.config.item_context == "late":
            texts = [paper_text(rec.get("title"), rec.get("abstract"))
                     for rec, per in zip(records, facets) for f in FACETS for _ in per[f]]
        vecs = embed_items(self.encoder, items, titles, self.config.title_weight, texts=texts)
        out, at = [], 0
        for per in facets:
            by_facet = {}
            for f in FACETS:
                by_facet[f] = vecs[at : at + len(per[f])]
                at += len(per[f])
            out.append(by_facet)
        return out

    def lexical_rows(self, records: list[dict[str, Any]], facets: list[FacetItems],
                     ) -> list[dict[str, sp.csr_matrix] | None]:
        """Per new paper, its lexical row per facet (its title and items of the facet, with the
        index's lexicon: `graft.lexical.facet_rows_of`), or None each where facet similarity has none."""
        if not self.lexical_on:  # the index holds lexical rows, so its lexicon too
            return [None] * len(records)
        return list(facet_rows_of(self.index.lexicon, [str(rec.get("title") or "") for rec in records], facets))

    def rows_many(self, records: list[dict[str, Any]], *, chunk: int = RECORD_CHUNK,
                  progress: Callable[[int], None] | None = None,
                  ) -> list[tuple[dict[str, sp.csr_matrix], FacetItems]]:
        """`rows` of many new papers: facets extracted and items embedded a chunk of records at a
        time (shared encoder batches) instead of one record at a time.

        The rows equal `rows`' up to the floating-point effect of batching on the sentence
        embeddings (same facet items and edges; weights within ~1e-6).

        Args:
            records: paper records (as `rows`).
            chunk: records per extraction and embedding pass.
            progress: called with the number of records finished after each chunk.
        Returns:
            (rows, facet items) per record, in order.
        """
        return [(rows, facets) for rows, facets, _ in self.score_many(records, chunk=chunk, progress=progress)]

    def score_many(self, records: list[dict[str, Any]], *, chunk: int = RECORD_CHUNK,
                   progress: Callable[[int], None] | None = None, facet_only: bool = False,
                   ) -> list[tuple[dict[str, sp.csr_matrix], FacetItems, dict[str, sp.csr_matrix] | None]]:
        """`rows_many`, and with `facet_only` also each paper's rows under facet-only weights
        (alpha = 1, beta = 0: facet similarity alone over the same candidates, as the facet-only
        baseline's graphs weigh corpus pairs); None in their place otherwise.

        Returns:
            (rows, facet items, facet-only rows or None) per record, in order.
        """
        plain = replace(self.params, alpha=1.0, beta=0.0)
        out: list[tuple[dict[str, sp.csr_matrix], FacetItems, dict[str, sp.csr_matrix] | None]] = []
        for start in range(0, len(records), max(1, chunk)):
            part = records[start : start + max(1, chunk)]
            facets = self.facets_of.many(part)
            cites = self.citation_rows(part)
            lexical = self.lexical_rows(part, facets)
            for rec, items, vectors, cite, lex in zip(part, facets, self.embed_items(part, facets), cites, lexical):
                rows = self.rows_from(cite, vectors, lexical=lex)
                if self.feedback:
                    rows = self.rows_from(self.with_feedback(rec, rows, cite), vectors, lexical=lex)
                out.append((rows, items, self.rows_from(cite, vectors, plain, lex) if facet_only else None))
            if progress is not None:
                progress(len(part))
        return out

    def citation_rows(self, records: list[dict[str, Any]]) -> list[sp.csr_matrix]:
        """Citation score rows (1 x n) of new papers: per corpus paper, the largest of
        - bibliographic coupling through the record's references into the corpus,
        - citation links: the share of those references that the paper cites or is cited by,
        - text coupling with the record's `text_neighbours` nearest papers by title + abstract
          (all records' texts embedded in one encoder call; skipped when text coupling is off).
        A record whose id is a corpus paper never gets a weight for that paper."""
        refs = [self.reference_rows(rec) for rec in records]
        out = []
        for r in refs:
            row = external_citation_row(self.index.citation_matrix, r, self.coupling_row_log,
                                        cited_by=self.index.cited_by)
            row = sp.csr_matrix(row, dtype=np.float32)
            out.append(row.maximum(self.link_share(r)) if len(r) else row)
        if self.text_neighbours and records:
            out = [row.maximum(coupled) for row, coupled in zip(out, self.facets_of.coupling_rows(
                records, self.text_neighbours))]
        return [_without(row, self._own_row(rec)) for row, rec in zip(out, records)]

    def reference_rows(self, record: dict[str, Any]) -> np.ndarray:
        """Corpus rows of a record's references into the corpus (sorted, distinct)."""
        row_of = self.index.row_of
        return np.array(sorted({row_of[r] for r in record.get("references") or [] if r in row_of}), dtype=np.int64)

    def _own_row(self, record: dict[str, Any]) -> int | None:
        """The corpus row of a record whose id is a corpus paper (posed as a record), else None."""
        return self.index.row_of.get(str(record.get("id")))

    def with_feedback(self, record: dict[str, Any], rows: dict[str, sp.csr_matrix],
                      cite: sp.csr_matrix, feedback: int | None = None) -> sp.csr_matrix:
        """The citation row `cite` raised, per paper, to the share of the `feedback` papers (default
        `self.feedback`) that the graph teacher ranks highest from `rows` (the record's first-pass edge
        rows) which the paper cites or is cited by. The record's own references and, for a record whose
        id is a corpus paper, that paper are never among those papers, nor weighted for itself."""
        r = self.feedback if feedback is None else feedback
        own = self._own_row(record)
        skip = set(self.reference_rows(record).tolist()) | (set() if own is None else {own})
        first = [self.index.row_of[h.paper_id] for h in self.index.query_rows(rows, k=r, exclude=skip).hits] \
            if r > 0 else []
        return self.raised(cite, first, own)
