"""Related papers of any query paper, by either retriever: what `graft query` runs, for Python callers.

A query is a corpus paper (`{"id": ID}`) or a paper outside the corpus (`{"title", "abstract"}`,
optionally `references` into the corpus and an `id`). The graph teacher walks a corpus paper's
stored rows (with the feedback pass when asked) and scores a new paper's rows at query time
(`graphbuild.external.ExternalScorer`: facets extracted and embedded as the build did, citation
half from its references, text coupling and the feedback pass), never returning the references it
lists. The generative retriever decodes a corpus paper's stored items or a new paper's extracted
ones, with the text channel for the new paper, and likewise never returns the references the new
paper lists (it does not use them otherwise). Papers outside the corpus asked together are taken
apart in shared encoder batches (`query_many`).

    from graft import Index
    from graphbuild.related import RelatedPapers

    related = RelatedPapers(Index.open("demo-index"), retriever="teacher")
    result = related.query({"title": "...", "abstract": "...", "references": ["P06-1112"]})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graft.config import is_number, is_whole
from graft.errors import GraftError
from graft.fusion import CITATION_WEIGHT, FUSIONS
from graft.index import RETRIEVERS, Index, has_model, teacher_fusion_error
from graft.results import QueryResult
from graphbuild.external import FEEDBACK, RECORD_CHUNK, TEXT_NEIGHBOURS, record_problem


def is_outside(record: dict[str, Any]) -> bool:
    """True for a paper outside the corpus (it has a title or abstract, or no id), False for a
    corpus paper given by its id alone."""
    return record.get("id") is None or bool(record.get("title") or record.get("abstract"))


class RelatedPapers:
    """One retriever's related papers over an index, with its extractor, encoder and scorers loaded
    once for all queries.

    Args:
        index: the opened index.
        retriever: "graft" or "teacher"; None = graft when the index holds a trained model.
        fusion: "graph-rrf", "rrf" or "graph-walk" (graft; None = graph-rrf); the teacher fuses with rrf.
        k: results per query; beams: beams per facet item (graft).
        text_neighbours: a paper outside the corpus: its M nearest papers by title + abstract (the
            teacher's text coupling, the generative retriever's text channel; 0 = off).
        feedback: the teacher's second pass over the links of the first R papers (None = 3 for a
            paper outside the corpus, 0 for a corpus paper, whose stored rows are walked).
        citation_weight: W of the citation channel (0 = off).
        device: where the generative retriever decodes.
        on_note: called once with each note worth showing a user (no text coupling or text channel
            for this index, and why).
        explain: name each facet credit's closest pair of items, the query's and the result's
            (`graft.explain.attach_matches`, `Evidence.match`).
    Raises:
        GraftError: an unknown retriever, a fusion the teacher does not use, a negative setting, k or
            beams below 1, or a device this machine lacks.
    """

    def __init__(self, index: Index, *, retriever: str | None = None, fusion: str | None = None, k: int = 20,
                 beams: int = 20, text_neighbours: int = TEXT_NEIGHBOURS, feedback: int | None = None,
                 citation_weight: float = CITATION_WEIGHT, device: str = "cpu",
                 on_note: Callable[[str], None] | None = None, explain: bool = False) -> None:
        self.retriever = retriever or ("graft" if has_model(index.path) else "teacher")
        if self.retriever not in RETRIEVERS:
            raise GraftError(f"unknown retriever {self.retriever!r}; use one of {', '.join(RETRIEVERS)}")
        if fusion is not None and fusion not in FUSIONS:
            raise GraftError(f"unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}")
        for name, value, low in (("k", k, 1), ("beams", beams, 1), ("text_neighbours", text_neighbours, 0),
                                 ("feedback", 0 if feedback is None else feedback, 0)):
            if not is_whole(value) or value < low:
                raise GraftError(f"{name} must be a whole number >= {low}, got {value!r}")
        if not is_number(citation_weight) or citation_weight < 0:
            raise GraftError(f"citation_weight must be a finite number >= 0, got {citation_weight!r}")
        if self.retriever == "graft":
            from graft.devices import resolve_device

            device = resolve_device(device)
        self.index, self.fusion, self.k, self.beams, self.device = index, fusion, k, beams, device
        self.text_neighbours, self.feedback, self.citation_weight = text_neighbours, feedback, citation_weight
        self.on_note, self.explain = on_note, explain
        self._noted: set[str] = set()
        self._made: dict[str, Any] = {}  # the scorers and extractor, each made on first use

    def _note(self, key: str, message: str) -> None:
        if key not in self._noted:
            self._noted.add(key)
            if self.on_note is not None:
                self.on_note(message)

    @property
    def scorer(self) -> Any:
        """The teacher's scorer of papers outside the corpus (`ExternalScorer`)."""
        if "scorer" not in self._made:
            from graphbuild.external import ExternalScorer

            self._made["scorer"] = scorer = ExternalScorer(
                self.index, text_neighbours=self.text_neighbours,
                feedback=FEEDBACK if self.feedback is None else self.feedback, citation_weight=self.citation_weight)
            if scorer.text_coupling_off and self.text_neighbours:
                self._note("coupling", f"no text coupling: {scorer.text_coupling_off}")
        return self._made["scorer"]

    @property
    def record_facets(self) -> Any:
        """The generative retriever's facet items of papers outside the corpus (`RecordFacets`)."""
        if "facets" not in self._made:
            from graphbuild.external import RecordFacets

            self._made["facets"] = RecordFacets(self.index)
        return self._made["facets"]

    def _text_channel(self) -> bool:
        if self.text_neighbours and self.index.paper_embeddings is None:
            self._note("channel", f"no text channel: index '{self.index.path}' has no embeddings/papers.npy "
                                  "(rebuild it with `graft build` to add them)")
        return bool(self.text_neighbours) and self.index.paper_embeddings is not None

    def check(self, records: list[dict[str, Any]]) -> None:
        """Refuse what cannot be answered before any work: a record that is neither a corpus id nor a
        paper with text, a corpus id the index lacks, or a paper outside the corpus for a teacher
        asked to fuse otherwise than with rrf.

        Raises:
            GraftError: the first such query.
        """
        for i, rec in enumerate(records, start=1):
            problem = record_problem(rec)
            if problem is not None:
                raise GraftError(f"query {i}: {problem} (got {str(rec)[:80]})")
        if self.retriever == "teacher" and self.fusion not in (None, "rrf") and any(map(is_outside, records)):
            raise teacher_fusion_error(self.index.path, self.fusion)
        for i, rec in enumerate(records, start=1):
            if not is_outside(rec) and str(rec["id"]) not in self.index.row_of:
                try:
                    self.index.row(str(rec["id"]))
                except GraftError as exc:
                    where = f"query {i}: " if len(records) > 1 else ""
                    raise GraftError(f"{where}{exc}; a paper outside the corpus is given by its title and "
                                     "abstract (graft query --text or --record)") from None

    def prepared(self, records: list[dict[str, Any]], progress: Callable[[int], None] | None = None,
                 ) -> dict[int, tuple]:
        """The papers outside the corpus among `records`, taken apart together (facets extracted and
        embedded in shared encoder batches, `RECORD_CHUNK` papers a pass): position -> what `query`
        needs of it. Fewer than two such papers: nothing to share, an empty dict."""
        todo = [i for i, rec in enumerate(records) if is_outside(rec)]
        if len(todo) < 2:
            return {}
        batch = [records[i] for i in todo]
        if self.retriever == "teacher":
            made = self.scorer.rows_many(batch, progress=progress)
        else:
            made = []
            for start in range(0, len(batch), RECORD_CHUNK):  # passes as the teacher's rows_many
                part = batch[start : start + RECORD_CHUNK]
                near = (self.record_facets.neighbours(part, self.text_neighbours) if self._text_channel()
                        else [None] * len(part))
                made += zip(self.record_facets.many(part), near)
                if progress is not None:
                    progress(len(part))
        return dict(zip(todo, made))

    def query(self, record: dict[str, Any], ready: tuple | None = None) -> QueryResult:
        """Related papers of one query paper (`ready`: its entry of `prepared`, if made). For a paper
        outside the corpus, `info["query_facets"]` holds the facet items extracted from its text."""
        result = self._query(record, ready)
        if self.explain:
            from graft.explain import attach_matches, corpus_items

            if is_outside(record):
                items = result.info["query_facets"]
                encoder = (self.scorer if self.retriever == "teacher" else self.record_facets).encoder
                texts = [t for f in items for t in items[f]]
                embedded = np.asarray(encoder.encode(texts), dtype=np.float32) if texts else None
                bounds = np.cumsum([0] + [len(items[f]) for f in items])
                vectors = {f: embedded[bounds[i]:bounds[i + 1]] for i, f in enumerate(items) if items[f]}
            else:
                items, vectors = corpus_items(self.index, str(record["id"]))
            attach_matches(self.index, result, items, vectors)
        return result

    def _query(self, record: dict[str, Any], ready: tuple | None) -> QueryResult:
        self.check([record])
        if not is_outside(record):
            pid = str(record["id"])
            if self.retriever == "teacher" and self.fusion in (None, "rrf"):
                if "corpus" not in self._made:
                    from graphbuild.external import CorpusScorer

                    self._made["corpus"] = CorpusScorer(self.index, feedback=self.feedback or 0,
                                                        citation_weight=self.citation_weight)
                return self._made["corpus"].query_paper(pid, k=self.k)
            return self.index.query(paper=pid, retriever=self.retriever, fusion=self.fusion, k=self.k,
                                    beams=self.beams, citation_weight=self.citation_weight, device=self.device)
        qid = str(record.get("id") or "query")
        # a corpus paper posed as a record (its id with a text) is not related to itself
        own = qid if record.get("id") is not None and qid in self.index.row_of else None
        if self.retriever == "teacher":
            teacher = self.scorer
            rows, items = ready if ready is not None else teacher.rows(record)
            known = set(teacher.reference_rows(record).tolist()) | ({self.index.row_of[own]} if own else set())
            result = teacher.query_rows(rows, query_id=qid, k=self.k, exclude=known)
            result.info["feedback"] = teacher.feedback if teacher.passes else 0
        else:
            if ready is not None:
                items, near = ready
            else:
                items = self.record_facets(record)
                near = (self.record_facets.neighbours([record], self.text_neighbours)[0] if self._text_channel()
                        else None)
            # the papers it already cites are not news to it: left out, as the teacher leaves them out
            known = {str(r) for r in record.get("references") or [] if str(r) in self.index.row_of}
            known |= {own} if own else set()
            result = self.index.query(facets=items, retriever=self.retriever, fusion=self.fusion, k=self.k,
                                      beams=self.beams, query_id=qid, citation_weight=self.citation_weight,
                                      neighbours=near, device=self.device, exclude=known or None)
        # the paper's facets as they were read from its text: what its facet credits refer to
        result.info["query_facets"] = {f: list(v) for f, v in items.items()}
        return result

    def query_many(self, records: list[dict[str, Any]], progress: Callable[[int], None] | None = None,
                   ) -> list[QueryResult]:
        """Related papers of each query paper, in order; the papers outside the corpus are taken
        apart together first (`prepared`; `progress` is called with the number of them done). A
        record without an id is named `query-N` after its position (from 1), so that each result has
        its own qid in a TREC run file.

        Raises:
            GraftError: as `check`, or two queries with one id.
        """
        self.check(records)
        records = [{**rec, "id": f"query-{i}"} if rec.get("id") is None else rec for i, rec in enumerate(records, start=1)]
        first: dict[str, int] = {}
        for i, rec in enumerate(records, start=1):
            qid = str(rec["id"])
            if qid in first:
                raise GraftError(f"query {i}: id {qid!r} is also query {first[qid]}'s; each query needs its own id "
                                 "(its qid in a TREC run file)")
            first[qid] = i
        ready = self.prepared(records, progress)
        return [self.query(rec, ready.get(i)) for i, rec in enumerate(records)]
