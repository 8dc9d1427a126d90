"""Edge rows for a paper outside the corpus, scored exactly as corpus rows are at build time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import scipy.sparse as sp

from graft.errors import InputValidationError
from graft.facets import FACETS, FacetItems
from graft.index import Index
from graphbuild.citations import coupling_row_log, external_citation_row
from graphbuild.embeddings import embed_items
from graphbuild.graph import GraphParams, external_facet_row
from graphbuild.similarity import group_items


def record_from_text(text: str) -> dict[str, Any]:
    """`"Title. Abstract..."` -> a record: the first sentence is the title, the rest the abstract."""
    from graft.text import split_sentences

    text = " ".join(text.split())
    if not text:
        raise InputValidationError("query text is empty; pass --text \"Title. Abstract ...\"")
    sents = split_sentences(text)
    title = sents[0] if sents else text
    abstract = " ".join(sents[1:]) or title
    return {"id": "query", "title": title, "abstract": abstract}


def read_record(path: str | Path) -> dict[str, Any]:
    """A query paper as a JSON object with `title` and `abstract` (optional id, references, full_text)."""
    path = Path(path)
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputValidationError(f"{path}: cannot read a JSON record ({exc})") from exc
    if not isinstance(rec, dict) or not (rec.get("title") or rec.get("abstract")):
        raise InputValidationError(
            f"{path}: a query record must be a JSON object with 'title' and/or 'abstract' "
            "(optional: id, references, full_text)"
        )
    return rec


class RecordFacets:
    """Facet items of papers outside the corpus, extracted as the index's build did: the offline
    heuristic extractor with the index's embedding model (loaded once)."""

    def __init__(self, index: Index, *, encoder: Any = None, extractor: Any = None) -> None:
        from graphbuild.build import BuildConfig

        self.config = BuildConfig.from_manifest(index.manifest)
        if encoder is None:
            from graphbuild.embeddings import Encoder

            encoder = Encoder(self.config.embedding_model, batch_size=self.config.embedding_batch_size)
        if extractor is None:
            from graphbuild.facets_heuristic import HeuristicFacetExtractor

            extractor = HeuristicFacetExtractor(encoder)
        self.encoder = encoder
        self.extractor = extractor

    def __call__(self, record: dict[str, Any]) -> FacetItems:
        return self.many([record])[0]

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


class ExternalScorer:
    """Scores new papers against an index: extracts facets, embeds items, builds top-K rows."""

    def __init__(self, index: Index, *, encoder: Any = None, extractor: Any = None) -> None:
        self.index = index
        self.facets_of = RecordFacets(index, encoder=encoder, extractor=extractor)
        self.config = self.facets_of.config
        self.encoder = self.facets_of.encoder
        self.params: GraphParams = self.config.graph_params()
        facet_col = index.facets["facet"].to_numpy()
        owner = index.item_rows
        vectors = np.asarray(index.item_embeddings, dtype=np.float32)
        self.coupling_row_log = coupling_row_log(index.citation_matrix, self.config.citation_rescale)
        self.items = {f: group_items(owner[facet_col == f], vectors[facet_col == f], index.n) for f in FACETS}

    def rows(self, record: dict[str, Any]) -> tuple[dict[str, sp.csr_matrix], FacetItems]:
        """Facet edge rows (1 x n each) of a new paper and the facet items they came from."""
        facets = self.facets_of(record)
        return self._rows_for(record, facets, self.embed_items([record], [facets])[0]), facets

    def embed_items(self, records: list[dict[str, Any]], facets: list[FacetItems]) -> list[dict[str, np.ndarray]]:
        """Embeddings of new papers' facet items, made as the index's build made its own (each
        item with its paper's title vector at the build's `title_weight`), in shared encoder batches.

        Args:
            records: the papers (their `title` is the items' context).
            facets: each paper's facet items (aligned with `records`).
        Returns:
            per paper, facet -> (items, d) unit rows.
        """
        items = [t for per in facets for f in FACETS for t in per[f]]
        titles = [str(rec.get("title") or "") for rec, per in zip(records, facets) for f in FACETS for _ in per[f]]
        vecs = embed_items(self.encoder, items, titles, self.config.title_weight)
        out, at = [], 0
        for per in facets:
            by_facet = {}
            for f in FACETS:
                by_facet[f] = vecs[at : at + len(per[f])]
                at += len(per[f])
            out.append(by_facet)
        return out

    def rows_many(self, records: list[dict[str, Any]], *, chunk: int = 256,
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
        out: list[tuple[dict[str, sp.csr_matrix], FacetItems]] = []
        for start in range(0, len(records), max(1, chunk)):
            part = records[start : start + max(1, chunk)]
            facets = self.facets_of.many(part)
            for record, items, vectors in zip(part, facets, self.embed_items(part, facets)):
                out.append((self._rows_for(record, items, vectors), items))
            if progress is not None:
                progress(len(part))
        return out

    def _rows_for(self, record: dict[str, Any], facets: FacetItems,
                  vectors: dict[str, np.ndarray]) -> dict[str, sp.csr_matrix]:
        """Edge rows from a record's references and its facet items' embeddings."""
        refs = [self.index.row_of[r] for r in record.get("references") or [] if r in self.index.row_of]
        cite = external_citation_row(self.index.citation_matrix, np.array(refs, dtype=np.int64),
                                     self.coupling_row_log)
        rows = {}
        for facet in FACETS:
            query = group_items(np.zeros(len(vectors[facet]), dtype=np.int64), vectors[facet], 1)
            rows[facet] = external_facet_row(query, self.items[facet], cite, self.params)
        return rows
