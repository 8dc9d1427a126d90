"""What a query reads of a large index without loading it whole: the derived files under
`INDEX/cache/query/` (walk graphs, citation matrices, item groups, coupling constants), items gathered
for the candidates only (`GatheredItems`), FAISS indexes memory-mapped without the corpus's vectors,
and the vectors' one whole scan. Each is checked against the in-memory path it replaces."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from graft import Index
from graft.ann import CandidateSearch, IVFCandidates
from graft.citations import coupling_row_log, external_citation_row
from graft.errors import GraftError, IndexFormatError
from graft.facets import FACETS
from graft.similarity import GatheredItems, group_items, score_pairs
from graft.teacher import symmetrise
from tests.test_ann import clustered


@pytest.fixture()
def index(web_index, tmp_path):
    """A private copy of the 40-paper web index (the build wrote its query files)."""
    shutil.copytree(web_index, tmp_path / "idx")
    return tmp_path / "idx"


def _is_mapped(a: np.ndarray) -> bool:
    while a is not None:
        if isinstance(a, np.memmap):
            return True
        a = a.base if isinstance(a.base, np.ndarray) else None
    return False


def test_the_build_writes_the_query_files_and_a_new_process_maps_them(index) -> None:
    folder = index / "cache" / "query"
    for kind in ("graphs", "walk", "links", "citations", "items", "coupling-pair"):
        record = json.loads((folder / kind / "build.json").read_text())
        assert record["version"] == list(Index.open(index).version) and record["names"]
    idx = Index.open(index)
    for facet in FACETS:  # the stored graphs too: a paper's out-edges without decompressing the npz whole
        stored = sp.load_npz(index / "graph" / f"{facet}.npz").tocsr()
        assert _is_mapped(idx.graphs[facet].indices) and _is_mapped(idx.graphs[facet].data)
        assert (idx.graphs[facet] != stored).nnz == 0 and stored.nnz > 0
    walk = idx.walk_graphs
    want = symmetrise(idx.graphs)
    for facet in FACETS:
        assert _is_mapped(walk[facet].indices) and _is_mapped(walk[facet].data)
        assert abs(walk[facet] - want[facet]).max() == 0 and walk[facet].nnz == want[facet].nnz > 0
    table = idx._citations_from_table()
    assert (idx.citation_matrix != table).nnz == 0 and idx.citation_matrix.nnz == idx.citations.height >= 3
    assert (idx.cited_by != table.T).nnz == 0
    assert (idx.citation_links != ((table + table.T) > 0)).nnz == 0
    np.testing.assert_array_equal(idx.coupling_row_log("pair"), coupling_row_log(table, "pair"))
    for facet in FACETS:  # item groups name each paper's items of the facet, in item order
        indptr, rows = idx.item_groups[facet]
        for node in (0, 5, idx.n - 1):
            mine = rows[indptr[node]:indptr[node + 1]]
            want_rows = idx.item_rows_of(idx.paper_ids[node], facet)
            np.testing.assert_array_equal(np.asarray(mine), want_rows)


def test_query_files_of_another_build_or_damaged_are_not_used(index) -> None:
    """Query files of another build, or damaged ones, are passed over: the matrices are made in
    memory (a query never writes into the index), and `prepare_queries` writes them again."""
    folder = index / "cache" / "query" / "walk"
    record = json.loads((folder / "build.json").read_text())
    (folder / "build.json").write_text(json.dumps({**record, "version": ["another", "build", "x"]}))
    idx = Index.open(index)
    want = symmetrise(idx.graphs)
    assert all(abs(idx.walk_graphs[f] - want[f]).max() == 0 for f in FACETS)
    assert not any(_is_mapped(idx.walk_graphs[f].indices) for f in FACETS)
    assert json.loads((folder / "build.json").read_text())["version"] == ["another", "build", "x"]
    # a column index past n: scipy would read outside its arrays; the files are not used
    Index.open(index).prepare_queries()
    indices = np.load(folder / "method.indices.npy")
    indices[0] = 10**6
    np.save(folder / "method.indices.npy", indices)
    idx = Index.open(index)
    assert abs(idx.walk_graphs["method"] - want["method"]).max() == 0
    assert not _is_mapped(idx.walk_graphs["method"].indices)
    idx.prepare_queries()
    assert int(np.load(folder / "method.indices.npy").max()) < idx.n
    assert _is_mapped(Index.open(index).walk_graphs["method"].indices)
    # a link out of the index is refused, as for the index's own files
    outside = index.parent / "elsewhere.npy"
    shutil.copy(folder / "method.data.npy", outside)
    (folder / "method.data.npy").unlink()
    os.symlink(outside, folder / "method.data.npy")
    with pytest.raises(IndexFormatError, match="leads out of the index folder"):
        Index.open(index).walk_graphs  # noqa: B018


def test_an_index_without_query_files_answers_alike_and_is_not_written(index) -> None:
    """An index built before the query files existed: queries make what they need in memory and
    write nothing into the index; the same answers as with the files."""
    pid = Index.open(index).paper_ids[0]
    with_files = Index.open(index).searcher(retriever="teacher").paper(pid)
    shutil.rmtree(index / "cache" / "query")
    before = sorted(p.relative_to(index) for p in index.rglob("*"))
    result = Index.open(index).searcher(retriever="teacher").paper(pid)
    assert [(h.paper_id, h.score) for h in result.hits] == [(h.paper_id, h.score) for h in with_files.hits]
    assert result.hits and sorted(p.relative_to(index) for p in index.rglob("*")) == before


def test_gathered_items_score_as_grouped_items() -> None:
    rng = np.random.default_rng(0)
    n, vectors = 300, clustered(900, d=32)
    owner = rng.integers(0, n, 900)
    owner[owner == 7] = 8  # paper 7 has no items
    grouped = group_items(owner, vectors, n)
    order = np.argsort(owner, kind="stable")
    indptr = np.searchsorted(owner[order], np.arange(n + 1))
    gathered = GatheredItems(vectors.astype(np.float16).astype(np.float32), indptr, order)
    np.testing.assert_allclose(gathered.pooled, grouped.pooled, atol=2e-3)
    query = group_items(np.zeros(3, dtype=np.int64), vectors[:3], 1)
    cols = np.array([7, 8, 0, 299, 150, 8])
    want = score_pairs(query, np.zeros(len(cols), dtype=np.int64), grouped, cols)
    got = score_pairs(query, np.zeros(len(cols), dtype=np.int64), gathered, cols)
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert got[0] == 0 and want[1] > 0  # a paper without items scores 0


def test_a_faiss_index_read_without_the_corpus_searches_alike(tmp_path) -> None:
    x = clustered(2000, d=32)
    search = CandidateSearch("faiss", nprobe=4)
    IVFCandidates(x, search).write(tmp_path / "ann.faiss")
    with_corpus = IVFCandidates.read(tmp_path / "ann.faiss", x, search)
    mapped = IVFCandidates.read(tmp_path / "ann.faiss", None, search, n=2000)
    np.testing.assert_array_equal(mapped.search(x[:40], 100), with_corpus.search(x[:40], 100))
    # a list shorter than the candidates asked for: every list probed, as the exact search would
    small = clustered(40, d=16, clusters=6, noise=0.1)
    tight = CandidateSearch("faiss", nprobe=1, lists=6)
    IVFCandidates(small, tight).write(tmp_path / "small.faiss")
    got = IVFCandidates.read(tmp_path / "small.faiss", None, tight, n=40).search(small, 30, self_rows=np.arange(40))
    want = IVFCandidates(small, tight).search(small, 30, self_rows=np.arange(40))
    for r in np.flatnonzero((got != want).any(axis=1)):  # near ties may trade places
        np.testing.assert_allclose(small[got[r]] @ small[r], small[want[r]] @ small[r], atol=1e-6)
    with pytest.raises(GraftError, match="holds 2000 vectors, the corpus 10 papers"):
        IVFCandidates.read(tmp_path / "ann.faiss", None, search, n=10)


def test_coupling_through_cited_by_rows_equals_the_transpose() -> None:
    a = (sp.random(200, 200, density=0.03, random_state=3, format="csr") > 0).astype(np.float32)
    row_log = coupling_row_log(a)
    refs = np.array([3, 17, 150])
    plain = external_citation_row(a, refs, row_log)
    by_rows = external_citation_row(a, refs, row_log, cited_by=a.T.tocsr())
    assert plain.nnz and abs(plain - by_rows).max() == 0


def test_text_queries_read_the_items_of_their_candidates_only(index) -> None:
    """A paper outside the corpus gets the same rows from gathered items as from the corpus's items
    grouped whole, and the vectors' scan is recorded once, then skipped until the file changes."""
    idx = Index.open(index)
    scorer = idx.searcher(retriever="teacher").scorer
    record = {"title": idx.paper_column("title")[3] + " revisited", "abstract": idx.papers["abstract"][3]}
    got, items = scorer.rows(record)
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    facet_col = idx.facets["facet"].to_numpy()
    whole = {f: group_items(idx.item_rows[facet_col == f], vectors[facet_col == f], idx.n) for f in FACETS}
    assert set(idx.lexical) >= set(FACETS)  # facet similarity blends in the papers' lexical rows
    for f in FACETS:
        whole[f].lexical = sp.csr_matrix(idx.lexical[f])  # read whole too
    scorer.__dict__["items"] = whole
    want, _ = scorer.rows(record)
    for facet in FACETS:
        assert abs(got[facet] - want[facet]).max() < 1e-5 and got[facet].nnz == want[facet].nnz
    assert any(got[f].nnz for f in FACETS)

    scanned = json.loads((index / "cache" / "query" / "scanned.json").read_text())["files"]
    assert set(scanned) >= {"embeddings/items.npy", "embeddings/papers.npy"}
    vecs = np.load(index / "embeddings" / "items.npy")
    vecs[2, 0] = np.nan
    np.save(index / "embeddings" / "items.npy", vecs)  # changed: scanned again, and refused
    with pytest.raises(IndexFormatError, match="row 2 is not finite"):
        Index.open(index).item_embeddings  # noqa: B018


def test_one_papers_items_are_read_from_their_row_groups(index) -> None:
    """`paper_facets` of a paper reads the text of the row groups that hold its items only, the same
    items in the same order as from `facets` read whole."""
    import polars as pl

    whole = Index.open(index)
    whole.facets  # noqa: B018 - read whole: the reference
    table = pl.read_parquet(index / "facets.parquet")
    table.write_parquet(index / "facets.parquet", row_group_size=16)  # several row groups
    lean = Index.open(index)
    for pid in whole.paper_ids[::7]:
        assert lean.paper_facets(pid) == whole.paper_facets(pid)
        assert any(whole.paper_facets(pid).values())
    assert "facets" not in lean.__dict__
    rows = np.array([5, 0, 33, 17])
    assert lean.facet_texts(rows) == table["text"].gather(rows).to_list()
    papers = pl.read_parquet(index / "papers.parquet")
    papers.write_parquet(index / "papers.parquet", row_group_size=8)
    lean = Index.open(index)
    for node in (0, 9, 39):
        want = papers.row(node, named=True)
        assert lean.paper_record(node) == {k: want.get(k) for k in ("title", "year", "venue")}
    assert "papers" not in lean.__dict__

