"""Why a result is related, in the papers' own words.

A facet credits a result because the query's and the result's items of that facet are alike (the
facet graph's edge weight is the symmetric mean of best-match cosines, `graft.similarity`).
`attach_matches` names, for every facet that credits a result, the pair of items behind the
strongest of those matches: the query's item and the result's item most alike, with their cosine
in the vectors the facet graphs were built from (`embeddings/items.npy`: each item read in its
paper's text and mixed with its title, as the build set), so the pair shown is the best match
inside the edge's weight and its cosine one of the cosines that weight averages. Where the build
blends word overlap into facet similarity (`graft.lexical`), the match also names the words the two
papers share in that facet, the largest part of their lexical cosine first. Nothing is re-ranked;
only `Evidence.match` is filled in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from graft.facets import FACETS
from graft.results import ItemMatch, QueryResult

if TYPE_CHECKING:
    from graft.index import Index


def corpus_items(index: Index, paper_id: str) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """A corpus paper's facet items and their graph vectors (`Index.item_embeddings`), per facet
    (in item order)."""
    vectors = index.item_embeddings
    rows = {facet: index.item_rows_of(paper_id, facet) for facet in FACETS}
    texts = iter(index.facet_texts(np.concatenate([rows[f] for f in FACETS])))  # one read of their row groups
    items = {facet: [next(texts) for _ in rows[facet]] for facet in FACETS}
    embedded = {facet: np.asarray(vectors[rows[facet]], dtype=np.float32) for facet in FACETS}
    return items, embedded


#: Shared words a match names at most.
MATCH_WORDS = 5


def shared_words(index: Index, query: Any, facet: str, paper_id: str, most: int = MATCH_WORDS) -> list[str]:
    """The terms of the query's lexical row `query` (1 x V) that the paper's row of `facet` also
    holds, by their part of the two rows' cosine (largest first, then alphabetical); none where the
    index has no lexical rows of the facet."""
    rows = index.lexical.get(facet)
    if rows is None or query is None or index.lexicon is None:
        return []
    mine = rows[index.row_of[paper_id]]
    q = sp.csr_matrix(query)
    common, qi, mi = np.intersect1d(q.indices, mine.indices, return_indices=True)
    if not len(common):
        return []
    part = np.asarray(q.data, dtype=np.float64)[qi] * np.asarray(mine.data, dtype=np.float64)[mi]
    terms = index.lexicon.terms
    order = sorted(range(len(common)), key=lambda k: (-part[k], terms[int(common[k])]))[:most]
    return [terms[int(common[k])] for k in order]


def attach_matches(index: Index, result: QueryResult, items: dict[str, list[str]],
                   vectors: dict[str, np.ndarray], lexical: dict[str, Any] | None = None) -> QueryResult:
    """Fill in `Evidence.match` of every facet credit of `result`'s hits: the query's item
    (`items[facet][i]`, embedded as `vectors[facet][i]`: unit rows made as the build made its graph
    vectors) and the hit's item of that facet with the highest cosine in the graph vectors, and the
    words the two share (`shared_words`, from the query's lexical rows `lexical`, per facet, where
    given). A facet without items on either side gets no match. Returns `result`."""
    stored = index.item_embeddings
    lexical = lexical or {}
    found = []  # (evidence, query item, the hit's item row, cosine, facet, hit)
    for hit in result.hits:
        for facet, evidence in hit.evidence.items():
            query = vectors.get(facet)
            rows = index.item_rows_of(hit.paper_id, facet)
            if query is None or not len(query) or not len(rows):
                continue
            cosines = np.asarray(query, dtype=np.float32) @ np.asarray(stored[rows], dtype=np.float32).T
            i, j = np.unravel_index(int(np.argmax(cosines)), cosines.shape)
            found.append((evidence, items[facet][i], int(rows[j]), float(cosines[i, j]), facet, hit.paper_id))
    texts = index.facet_texts(np.array([f[2] for f in found], dtype=np.int64))  # the hits' items, read at once
    for (evidence, mine, _, cosine, facet, paper_id), theirs in zip(found, texts):
        evidence.match = ItemMatch(query=mine, hit=theirs, cosine=round(cosine, 4),
                                   words=shared_words(index, lexical.get(facet), facet, paper_id))
    return result
