"""Integration: build real indexes (cs768 slice, ACLSum slice) and query them."""

from __future__ import annotations

import gzip
import json
import pickle
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from conftest import cached_folder, cs768_path

from graft.errors import IndexFormatError
from graft.facets import FACETS
from graft.index import Index
from graphbuild.build import BuildConfig, build_index


def write_slice(path, n: int, tmp_path):
    """First n cs768 records with references kept only inside the slice."""
    records = []
    with gzip.open(path, "rt") as fh:
        for line in fh:
            records.append(json.loads(line))
            if len(records) == n:
                break
    out = tmp_path / "slice.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return out


@pytest.fixture(scope="session")
def cs768_index(request, tmp_path_factory, encoder):
    """A 400-paper cs768 index and its build summary (kept in pytest's cache: `cached_folder`)."""
    tmp = tmp_path_factory.mktemp("cs768")
    # the 400 newest-first lines are dense in citations among themselves
    corpus = write_slice(cs768_path(), 400, tmp)

    def build(folder: Path) -> None:
        summary = build_index(corpus, folder / "index", BuildConfig(), encoder=encoder)
        (folder / "summary.pickle").write_bytes(pickle.dumps(summary))

    folder = cached_folder(request, tmp_path_factory, "cs768-400", [corpus, repr(BuildConfig())], build)
    return folder / "index", pickle.loads((folder / "summary.pickle").read_bytes())


def test_index_artefacts_follow_the_contract(cs768_index) -> None:
    out, summary = cs768_index
    idx = Index.open(out)
    n = idx.n
    assert n == 400
    assert idx.papers.columns == ["paper_id", "title", "abstract", "year", "venue", "authors", "n_citations"]
    assert idx.citations.columns == ["citing", "cited"]
    assert idx.citations.height == summary.counts["citations"] > 0
    assert set(idx.citations["citing"]) <= set(idx.paper_ids)
    # in-corpus citation counts agree with citations.parquet
    counts = idx.citations.group_by("cited").len()
    top = counts.sort("len", descending=True).row(0)
    assert idx.papers.filter(pl.col("paper_id") == top[0])["n_citations"][0] == top[1]
    # facets: every paper has >= 1 item in every facet; embeddings aligned and unit length
    per = idx.facets.group_by(["paper_id", "facet"]).len()
    assert per.height == n * len(FACETS)
    emb = np.asarray(idx.item_embeddings, dtype=np.float32)
    assert emb.shape[0] == idx.facets.height and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=2e-3)
    # graphs: top-20 out-edges, weights in (0, 1], no self-loops
    for facet in FACETS:
        g = idx.graphs[facet]
        assert g.shape == (n, n)
        assert np.diff(g.indptr).max() <= 20
        assert g.data.min() > 0 and g.data.max() <= 1.0
        assert g.diagonal().sum() == 0
        assert summary.counts["edges"][facet] == g.nnz
    cite = idx.citation_score
    assert abs(cite - cite.T).max() < 1e-6
    m = idx.manifest
    build = m["stages"]["build"]
    assert len(m["corpus_hash"]) == 64
    assert build["config"]["top_k"] == 20 and build["config"]["alpha"] == 0.75
    assert set(build["timings_s"]) >= {"load", "facets", "embed", "citations", "graph", "write"}
    assert "sentence-transformers" in build["versions"]


def test_cited_papers_get_citation_weight(cs768_index) -> None:
    idx = Index.open(cs768_index[0])
    # a coupled pair that made it into a facet graph carries beta * cite on top of alpha * sim
    cite = idx.citation_score.tocoo()
    strongest = int(np.argmax(cite.data))
    i, j = int(cite.row[strongest]), int(cite.col[strongest])
    weights = [idx.graphs[f][i, j] for f in FACETS]
    assert max(weights) >= 0.25 * cite.data[strongest]


def test_citation_links_are_the_citations_either_way(cs768_index) -> None:
    idx = Index.open(cs768_index[0])
    links = idx.citation_links.toarray()
    expected = [(idx.row(c), idx.row(d)) for c, d in zip(idx.citations["citing"].to_list(),
                                                          idx.citations["cited"].to_list())]
    assert expected, "the slice has citations"
    assert {(int(i), int(j)) for i, j in zip(*np.nonzero(links))} == \
        {e for c, d in expected for e in ((c, d), (d, c))}
    assert set(np.unique(links).tolist()) <= {0.0, 1.0}


def test_teacher_query_returns_attributed_corpus_papers(cs768_index) -> None:
    idx = Index.open(cs768_index[0])
    pid = idx.citations["citing"][0]
    res = idx.query_paper(pid, k=20)
    assert 0 < len(res.hits) <= 20
    assert pid not in [h.paper_id for h in res.hits]
    assert [h.rank for h in res.hits] == list(range(1, len(res.hits) + 1))
    assert all(res.hits[i].score >= res.hits[i + 1].score for i in range(len(res.hits) - 1))
    for h in res.hits:
        assert h.paper_id in idx.row_of
        assert h.facets and set(h.facets) <= set(FACETS)
        assert sum(h.facets.values()) == pytest.approx(h.score)
        for facet, ev in h.evidence.items():
            assert ev.weight > 0 and ev.hops in (1, 2)
            t = idx.teacher()
            lst = t.facet_list(facet, t.node_rows(idx.row(pid))[facet], {idx.row(pid)})
            assert lst[ev.rank - 1].node == idx.row(h.paper_id)  # rank = position in that facet's list
            if ev.hops == 1:  # a one-hop claim is an edge of the (symmetrised) facet graph
                i, j = idx.row(pid), idx.row(h.paper_id)
                assert max(idx.graphs[facet][i, j], idx.graphs[facet][j, i]) == pytest.approx(ev.weight, abs=1e-5)
            else:
                assert ev.via in idx.row_of


def _closest_pairs(query_vecs, query_texts, hit_vecs, hit_texts):
    """The best cosine of two item lists and every (query item, hit item) pair within 1e-5 of it."""
    cos = np.asarray(query_vecs, dtype=np.float32) @ np.asarray(hit_vecs, dtype=np.float32).T
    best = float(cos.max())
    return best, {(query_texts[i], hit_texts[j]) for i, j in zip(*np.nonzero(cos >= best - 1e-5))}


def test_explained_hits_name_the_closest_items_of_each_crediting_facet(cs768_index) -> None:
    """--explain: each facet credit of a corpus paper's hits names the query's and the hit's items
    of that facet with the highest cosine in the vectors the facet graphs were built from
    (items.npy: read in context, with the title), checked against every pair; a paper outside the
    corpus matches its items embedded as its facet rows were."""
    idx = Index.open(cs768_index[0])
    assert idx.build_setting("item_context", "title") == "late"
    graph = np.load(cs768_index[0] / "embeddings" / "items.npy").astype(np.float32)
    facets = idx.facets.with_row_index("row")

    def items(pid, facet):
        rows = facets.filter((pl.col("paper_id") == pid) & (pl.col("facet") == facet)).sort("item_idx")
        return graph[rows["row"].to_numpy()], rows["text"].to_list()

    pid = idx.citations["citing"][0]
    plain = idx.searcher(retriever="teacher").paper(pid)
    assert all(e.match is None for h in plain.hits for e in h.evidence.values())
    res = idx.searcher(retriever="teacher", explain=True).paper(pid)
    assert [h.paper_id for h in res.hits] == [h.paper_id for h in plain.hits]  # nothing re-ranked
    checked = 0
    for h in res.hits:
        for facet, ev in h.evidence.items():
            (qv, qt), (hv, ht) = items(pid, facet), items(h.paper_id, facet)
            if not qt or not ht:
                assert ev.match is None
                continue
            best, pairs = _closest_pairs(qv, qt, hv, ht)
            assert ev.match.cosine == pytest.approx(best, abs=1e-4)
            assert (ev.match.query, ev.match.hit) in pairs
            checked += 1
    assert checked >= len(res.hits)

    row = idx.papers.row(7, named=True)
    record = {"title": row["title"] + " revisited", "abstract": row["abstract"]}
    searcher = idx.searcher(retriever="teacher", explain=True)
    outside = searcher.text(record["title"], record["abstract"])
    read = outside.info["query_facets"]
    vectors = searcher.scorer.embed_items([record], [{f: read.get(f, []) for f in FACETS}])[0]
    matched = [(h, f, e.match) for h in outside.hits for f, e in h.evidence.items() if e.match is not None]
    assert matched
    for h, facet, m in matched:
        hv, ht = items(h.paper_id, facet)
        best, pairs = _closest_pairs(vectors[facet], read[facet], hv, ht)
        assert m.cosine == pytest.approx(best, abs=1e-4) and (m.query, m.hit) in pairs
    own = [m for h in outside.hits if h.paper_id == row["paper_id"] for m in
           (e.match for e in h.evidence.values()) if m is not None]
    assert own and max(m.cosine for m in own) > 0.95  # its own abstract's sentences are among the items


def test_teacher_finds_citation_neighbours_better_than_chance(cs768_index) -> None:
    idx = Index.open(cs768_index[0])
    cites = idx.citations
    neighbours: dict[str, set[str]] = {}
    for a, b in zip(cites["citing"].to_list(), cites["cited"].to_list()):
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    queries = [p for p, s in neighbours.items() if len(s) >= 3][:40]
    recalls = []
    for q in queries:
        got = {h.paper_id for h in idx.query_paper(q, k=20).hits}
        recalls.append(len(got & neighbours[q]) / len(neighbours[q]))
    # chance level is 20 / 399 = 0.05
    assert np.mean(recalls) > 0.3


def test_external_query_of_a_corpus_paper_finds_itself(cs768_index, encoder) -> None:
    from graft.external import ExternalScorer

    idx = Index.open(cs768_index[0])
    row = idx.papers.row(5, named=True)
    scorer = ExternalScorer(idx, encoder=encoder)
    rows, facets = scorer.rows({"title": row["title"], "abstract": row["abstract"]})
    assert all(facets[f] for f in FACETS)
    res = idx.query_rows(rows, k=10)
    assert res.hits[0].paper_id == row["paper_id"]


def test_items_are_embedded_with_their_title_and_new_papers_the_same_way(encoder, tmp_path) -> None:
    import shutil

    from graft.external import ExternalScorer

    corpus = write_slice(cs768_path(), 40, tmp_path)
    build_index(corpus, tmp_path / "titled", BuildConfig(item_context="title", title_weight=0.7), encoder=encoder)
    idx = Index.open(tmp_path / "titled")
    assert idx.manifest["stages"]["build"]["config"]["title_weight"] == 0.7
    emb = np.asarray(idx.item_embeddings, dtype=np.float32)
    row = idx.papers.row(7, named=True)
    mine = np.flatnonzero(idx.item_rows == 7)
    texts = idx.facets["text"].to_list()
    expect = encoder.encode([texts[i] for i in mine]) + 0.7 * encoder.encode([" ".join(row["title"].split())])
    expect /= np.linalg.norm(expect, axis=1, keepdims=True)
    np.testing.assert_allclose(emb[mine], expect, atol=2e-3)  # float16 on disk
    plain = encoder.encode([texts[i] for i in mine])
    assert np.abs(emb[mine] - plain).max() > 0.05  # not the item alone
    # the items alone are kept beside them, for comparing sentences with items
    np.testing.assert_allclose(np.asarray(idx.item_text_embeddings, dtype=np.float32)[mine], plain, atol=2e-3)
    shutil.copytree(tmp_path / "titled", tmp_path / "older")
    (tmp_path / "older" / "embeddings" / "items_alone.npy").unlink()
    with pytest.raises(IndexFormatError, match="lacks embeddings/items_alone.npy.*graft build"):
        _ = Index.open(tmp_path / "older").item_text_embeddings
    # a new paper's items are embedded as the build embedded the corpus': the paper's own facet
    # items, scored as a new paper, reproduce its stored vectors
    facets = idx.paper_facets(row["paper_id"])
    got = ExternalScorer(idx, encoder=encoder).embed_items([row], [facets])[0]
    for f in FACETS:
        stored = emb[mine[idx.facets["facet"].to_numpy()[mine] == f]]
        np.testing.assert_allclose(got[f], stored, atol=2e-3)


def test_title_weight_zero_embeds_items_alone_and_old_manifests_read_as_zero(tmp_path, encoder) -> None:
    corpus = write_slice(cs768_path(), 40, tmp_path)
    build_index(corpus, tmp_path / "plain", BuildConfig(title_weight=0.0, item_context="title"), encoder=encoder)
    idx = Index.open(tmp_path / "plain")
    emb = np.asarray(idx.item_embeddings, dtype=np.float32)
    np.testing.assert_allclose(emb[:5], encoder.encode(idx.facets["text"].to_list()[:5]), atol=2e-3)
    assert not (tmp_path / "plain" / "embeddings" / "items_alone.npy").exists()  # the same vectors: not kept twice
    assert idx.item_text_embeddings is idx.item_embeddings
    old = dict(idx.manifest["stages"]["build"]["config"])
    del old["title_weight"]  # an index built before the setting existed
    assert BuildConfig.from_dict(old).title_weight == 0.0
    assert BuildConfig().title_weight == 0.35 and BuildConfig().item_context == "late"
    assert old["direct_links"] is False and BuildConfig().direct_links is False
    del old["direct_links"]  # built when direct citation links were always candidates
    assert BuildConfig.from_dict(old).direct_links is True
    for bad in (-0.5, 1e20):  # 1e20 (and NaN, infinity) emptied every graph
        with pytest.raises(ValueError, match=r"title_weight must lie in \[0, 100\]"):
            BuildConfig(title_weight=bad)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=rf"title_weight={bad} \(a finite number\)"):
            BuildConfig(title_weight=bad)
    # wrong types and sizes are refused when the config is made, not part-way through a build (or
    # never: block_rows -1 built empty graphs, top_k 2.5 kept 3 edges)
    for bad, message in (({"block_rows": -1}, "block_rows=-1: must be >= 1"),
                         ({"block_rows": 0}, "block_rows=0: must be >= 1"),
                         ({"n_candidates": 0}, "n_candidates=0: must be >= 1"),
                         ({"linked_candidates": -1}, "linked_candidates must be >= 0 (0 = all), got -1"),
                         ({"top_k": 2.5}, "top_k=2.5 (a whole number)"), ({"top_k": "5"}, "top_k='5' (a whole number)"),
                         ({"top_k": True}, "top_k=True (a whole number)"),
                         ({"embedding_batch_size": 2.5}, "embedding_batch_size=2.5 (a whole number or None)"),
                         ({"limit": 0}, "limit=0: must be >= 1"),
                         ({"title_weight": "0.5"}, "title_weight='0.5' (a finite number)"),
                         ({"paper_embeddings": "no"}, "paper_embeddings='no' (True or False)")):
        with pytest.raises(ValueError, match=re.escape(message)):
            BuildConfig(**bad)


def test_items_read_in_context_flow_into_the_graph_and_new_papers_are_read_the_same_way(tmp_path, encoder) -> None:
    from graft.encoder import ContextReader, context_key, read_or_alone
    from graft.external import ExternalScorer
    from graft.text import paper_texts

    corpus = write_slice(cs768_path(), 40, tmp_path)
    build_index(corpus, tmp_path / "late", BuildConfig(), encoder=encoder)
    build_index(corpus, tmp_path / "title", BuildConfig(item_context="title"), encoder=encoder)
    late, title = Index.open(tmp_path / "late"), Index.open(tmp_path / "title")
    assert late.manifest["stages"]["build"]["config"]["item_context"] == "late"
    assert late.facets["text"].to_list() == title.facets["text"].to_list()  # the same items, other vectors
    texts = paper_texts(late.papers)
    read = ContextReader(encoder).encode([context_key(texts[r], t) for r, t in
                                          zip(late.item_rows.tolist(), late.facets["text"].to_list())])
    found = np.abs(read).sum(axis=1) > 0
    assert found.mean() > 0.9  # items are sentences of their abstract (a few lie past the token window)
    emb, plain = (np.asarray(i.item_embeddings, dtype=np.float32) for i in (late, title))
    np.testing.assert_allclose(emb[~found], plain[~found], atol=2e-3)  # not found: the title form
    assert np.abs(emb[found] - plain[found]).max() > 0.05
    np.testing.assert_allclose(np.asarray(late.paper_embeddings, np.float32),
                               np.asarray(title.paper_embeddings, np.float32), atol=2e-3)  # the same paper vectors
    assert late.graphs["method"].nnz and (late.graphs["method"] != title.graphs["method"]).nnz
    # a new paper's items are read in its own title + abstract as the build read the corpus's
    row = late.papers.row(3, named=True)
    got = ExternalScorer(late, encoder=encoder).embed_items([row], [late.paper_facets(row["paper_id"])])[0]
    mine = np.flatnonzero(late.item_rows == 3)
    for f in FACETS:
        np.testing.assert_allclose(got[f], emb[mine[late.facets["facet"].to_numpy()[mine] == f]], atol=2e-3)
    # read in context without the title: items.npy is the read vectors, items_alone.npy the items alone
    build_index(corpus, tmp_path / "late0", BuildConfig(title_weight=0.0), encoder=encoder, cache_from=tmp_path / "late")
    late0 = Index.open(tmp_path / "late0")
    np.testing.assert_allclose(np.asarray(late0.item_embeddings, np.float32), read_or_alone(read, np.asarray(
        late0.item_text_embeddings, np.float32)), atol=2e-3)
    np.testing.assert_allclose(np.asarray(late0.item_text_embeddings, np.float32),
                               np.asarray(late.item_text_embeddings, np.float32), atol=1e-6)
    old = dict(late.manifest["stages"]["build"]["config"])
    del old["item_context"]  # built before the setting
    assert BuildConfig.from_dict(old).item_context == "title"
    with pytest.raises(ValueError, match="item_context 'words' is unknown; allowed: title, late"):
        BuildConfig(item_context="words")


def test_rebuild_is_deterministic_and_a_killed_build_is_refused(tmp_path, encoder, monkeypatch) -> None:
    corpus = write_slice(cs768_path(), 60, tmp_path)
    out = tmp_path / "idx"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    first = {f: Index.open(out).graphs[f].toarray() for f in FACETS}
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    for f in FACETS:
        np.testing.assert_array_equal(Index.open(out).graphs[f].toarray(), first[f])

    import graphbuild.build as b

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(b, "facet_graph", boom)  # killed before it writes: the old index stands
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, out, BuildConfig(), encoder=encoder)
    for f in FACETS:
        np.testing.assert_array_equal(Index.open(out).graphs[f].toarray(), first[f])
    monkeypatch.undo()
    written, write_npz = [], b.write_npz

    def write_then_die(path, matrix):  # killed while it writes the graphs: the index is refused
        if written:
            raise KeyboardInterrupt
        written.append(path)
        write_npz(path, matrix)

    monkeypatch.setattr(b, "write_npz", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, out, BuildConfig(), encoder=encoder)
    with pytest.raises(IndexFormatError, match=re.escape(f"its rebuild was stopped: run `graft build {corpus} --out "
                                                         f"{out}` again (it resumes)")):
        Index.open(out)


class CountingEncoder:
    """The session encoder, counting the texts it is asked to embed."""

    def __init__(self, encoder) -> None:
        self.inner, self.texts = encoder, 0
        self.name, self.batch_size, self.dim = encoder.name, encoder.batch_size, encoder.dim

    def encode(self, texts, **kwargs):
        self.texts += len(texts)
        return self.inner.encode(texts, **kwargs)

    def remember(self, texts, vectors):
        self.inner.remember(texts, vectors)

    def read_in_context(self, texts, spans, **kwargs):
        self.texts += len(texts)
        return self.inner.read_in_context(texts, spans, **kwargs)


def _built(out):
    idx = Index.open(out)
    return ({f: idx.graphs[f].toarray() for f in FACETS}, idx.facets,
            np.load(out / "embeddings" / "items.npy"), np.load(out / "embeddings" / "papers.npy"))


def _assert_same_build(a, b) -> None:
    for f in FACETS:
        np.testing.assert_array_equal(a[0][f], b[0][f])
    assert a[1].equals(b[1])
    np.testing.assert_array_equal(a[2], b[2])
    np.testing.assert_array_equal(a[3], b[3])


def _store_files(out, stage):
    return sorted(p.name for p in (out / "cache" / "build" / stage).iterdir())


def _stored_rows(out, stage) -> int:
    folder = out / "cache" / "build" / stage
    return sum(json.loads(p.read_text())["vectors"][0][0] for p in folder.glob("*.json"))


def test_a_killed_build_resumes_from_its_stores_and_equals_a_fresh_one(tmp_path, encoder, monkeypatch) -> None:
    import graphbuild.build as b

    corpus = write_slice(cs768_path(), 50, tmp_path)
    out = tmp_path / "idx"
    first = build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert first.reused == []
    fresh = _built(out)
    assert sorted(p.name for p in (out / "cache" / "build").iterdir()) == ["context", "facets", "papers", "titles"]
    for stage in ("facets", "papers", "titles"):
        assert _store_files(out, stage) == ["000000.json", "000000.parquet", "000000.vectors.npy"]
    assert _stored_rows(out, "facets") == fresh[1].height and _stored_rows(out, "papers") == 50

    def boom(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # killed in the graph stage, after every encoder pass
        m.setattr(b, "facet_graph", boom)
        with pytest.raises(KeyboardInterrupt):
            build_index(corpus, out, BuildConfig(), encoder=encoder)
    counting = CountingEncoder(encoder)
    resumed = build_index(corpus, out, BuildConfig(), encoder=counting)
    assert resumed.reused == ["facets", "titles", "context", "papers"] and counting.texts == 0
    assert resumed.counts["extractor"] == first.counts["extractor"]
    assert Index.open(out).manifest["stages"]["build"]["reused_checkpoints"] == resumed.reused
    _assert_same_build(_built(out), fresh)

    # other graph settings reuse them too, and give what a build from scratch gives
    other = BuildConfig(top_k=7, alpha=0.5, beta=0.5, title_weight=0.4)
    assert build_index(corpus, out, other, encoder=counting).reused == ["facets", "titles", "context", "papers"]
    assert counting.texts == 0
    build_index(corpus, tmp_path / "scratch", other, encoder=encoder)
    _assert_same_build(_built(out), _built(tmp_path / "scratch"))

    again = build_index(corpus, out, BuildConfig(), encoder=counting, fresh=True)
    assert again.reused == [] and counting.texts > 0
    _assert_same_build(_built(out), fresh)
    for stage in ("facets", "papers", "titles"):  # --fresh empties the stores and fills them anew
        assert _store_files(out, stage) == ["000000.json", "000000.parquet", "000000.vectors.npy"]


def test_a_build_killed_in_the_facets_stage_keeps_the_papers_it_finished(tmp_path, encoder, monkeypatch) -> None:
    import graphbuild.build as b
    from graft.extract import HeuristicFacetExtractor

    monkeypatch.setattr(b, "CHECKPOINT_PAPERS", 16)  # 50 papers: batches of 16, 16, 16 and 2
    corpus = write_slice(cs768_path(), 50, tmp_path)
    build_index(corpus, tmp_path / "scratch", BuildConfig(), encoder=encoder)
    calls = []
    extract = HeuristicFacetExtractor.extract_counted

    def killed_in_batch_3(self, papers, **kwargs):
        calls.append(papers.height)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return extract(self, papers, **kwargs)

    out = tmp_path / "idx"
    with monkeypatch.context() as m:
        m.setattr(HeuristicFacetExtractor, "extract_counted", killed_in_batch_3)
        with pytest.raises(KeyboardInterrupt):
            build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert calls == [16, 16, 16]
    assert _store_files(out, "facets") == ["000000.json", "000000.parquet", "000000.vectors.npy",
                                           "000001.json", "000001.parquet", "000001.vectors.npy"]
    calls.clear()
    with monkeypatch.context() as m:
        m.setattr(HeuristicFacetExtractor, "extract_counted", killed_in_batch_3)
        resumed = build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert calls == [16, 2]  # only the papers the killed run did not finish
    assert resumed.reused == ["facets (32 of 50 papers)"]
    _assert_same_build(_built(out), _built(tmp_path / "scratch"))
    assert resumed.counts["extractor"] == Index.open(tmp_path / "scratch").manifest["stages"]["build"][
        "counts"]["extractor"]

    (tmp_path / "short").mkdir()
    shorter = write_slice(cs768_path(), 20, tmp_path / "short")  # 30 of the 50 papers go: rewritten to 20
    summary = build_index(shorter, out, BuildConfig(), encoder=encoder)
    assert summary.reused == ["facets", "titles", "context", "papers"]
    assert _stored_rows(out, "facets") == Index.open(out).facets.height and _stored_rows(out, "papers") == 20
    build_index(shorter, tmp_path / "scratch20", BuildConfig(), encoder=encoder)
    _assert_same_build(_built(out), _built(tmp_path / "scratch20"))


def _count_extractions(monkeypatch) -> list[str]:
    """The ids of the papers the heuristic extractor takes apart from now on, in order."""
    from graft.extract import HeuristicFacetExtractor

    extracted: list[str] = []
    extract = HeuristicFacetExtractor.extract_counted

    def counted(self, papers, **kwargs):
        extracted.extend(papers["paper_id"].to_list())
        return extract(self, papers, **kwargs)

    monkeypatch.setattr(HeuristicFacetExtractor, "extract_counted", counted)
    return extracted


def test_a_grown_corpus_takes_apart_only_its_new_papers(tmp_path, encoder, monkeypatch) -> None:
    """An index rebuilt from a corpus with papers added, one edited and the rows shuffled extracts
    and embeds only the new and edited papers, and equals a build from scratch of that corpus; on
    ONNX Runtime bit for bit."""
    records = [json.loads(line) for line in write_slice(cs768_path(), 30, tmp_path).read_text().splitlines()]
    known = {r["id"] for r in records[:22]}
    (tmp_path / "old.jsonl").write_text("".join(json.dumps({**r, "references": [x for x in r["references"]
                                                             if x in known]}) + "\n" for r in records[:22]))
    records[7]["abstract"] += " We also release the code."
    rng = np.random.default_rng(0)
    grown = [records[i] for i in rng.permutation(len(records))]
    (tmp_path / "new.jsonl").write_text("".join(json.dumps(r) + "\n" for r in grown))

    extracted = _count_extractions(monkeypatch)
    for backend in ("torch", "onnx"):
        out, scratch = tmp_path / f"idx-{backend}", tmp_path / f"scratch-{backend}"
        config = BuildConfig(embedding_backend=backend)
        use = {"encoder": encoder} if backend == "torch" else {}  # onnx: the build's own encoder
        build_index(tmp_path / "old.jsonl", out, config, **use)
        extracted.clear()
        counting = CountingEncoder(encoder) if backend == "torch" else None
        summary = build_index(tmp_path / "new.jsonl", out, config, **({"encoder": counting} if counting else {}))
        assert sorted(extracted) == sorted([records[7]["id"]] + [r["id"] for r in records[22:]])
        unchanged = {r["id"] for r in records[:22]} - {records[7]["id"]}
        items = Index.open(out).facets["paper_id"].to_list()
        assert summary.reused == ["facets (21 of 30 papers)", "titles (22 of 30)",
                                  f"context ({sum(p in unchanged for p in items)} of {len(items)})", "papers (21 of 30)"]
        if counting is not None:  # the new papers' sentences, items, titles and texts, nothing else
            assert 0 < counting.texts < 16 * 20
        build_index(tmp_path / "new.jsonl", scratch, config, **use)
        assert Index.open(out).manifest["embedding"]["backend"] == backend
        assert summary.counts["extractor"] == Index.open(scratch).manifest["stages"]["build"]["counts"]["extractor"]
        if backend == "onnx":
            _assert_same_build(_built(out), _built(scratch))
            for name in ("papers.parquet", "citations.parquet", "facets.parquet", "embeddings/items.npy",
                         "embeddings/papers.npy", "graph/method.npz", "graph/citation.npz"):
                assert (out / name).read_bytes() == (scratch / name).read_bytes(), name
        else:
            a, b_ = _built(out), _built(scratch)
            assert a[1].equals(b_[1])
            np.testing.assert_allclose(a[2], b_[2], atol=2e-3)  # float16 files: one rounding step
            for f in FACETS:
                np.testing.assert_array_equal(a[0][f] > 0, b_[0][f] > 0)
                np.testing.assert_allclose(a[0][f], b_[0][f], atol=1e-5)


@pytest.mark.slow
def test_a_build_seeded_from_another_index_takes_apart_only_what_that_one_lacks(tmp_path, monkeypatch) -> None:
    """--cache-from: a slice of an indexed corpus plus papers the index lacks copies the slice's
    facets and vectors from it, extracts and embeds only the others, equals a build from scratch of
    that corpus bit for bit (ONNX Runtime), and leaves the other index as it was."""
    from graft.errors import GraftError

    records = [json.loads(line) for line in write_slice(cs768_path(), 33, tmp_path).read_text().splitlines()]

    def write(name, part):
        ids = {r["id"] for r in part}
        path = tmp_path / name
        path.write_text("".join(json.dumps({**r, "references": [x for x in r["references"] if x in ids]}) + "\n"
                                for r in part))
        return path

    whole, part = write("whole.jsonl", records[:30]), write("part.jsonl", records[5:25] + records[30:])
    extracted = _count_extractions(monkeypatch)
    config = BuildConfig(embedding_backend="onnx")
    build_index(whole, tmp_path / "whole", config)
    other_cache = tmp_path / "whole" / "cache" / "build"
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in other_cache.rglob("*")}
    extracted.clear()
    summary = build_index(part, tmp_path / "part", config, cache_from=tmp_path / "whole")
    assert sorted(extracted) == sorted(r["id"] for r in records[30:])
    titles = {r["title"] for r in records[5:25]}
    seeded_ids = {r["id"] for r in records[5:25]}
    items = Index.open(tmp_path / "part").facets["paper_id"].to_list()
    in_both = sum(p in seeded_ids for p in items)  # items read in context: one stored row per item
    assert summary.seeded == {"facets": 20, "titles": len(titles), "context": in_both, "papers": 20}
    assert summary.seeded_from == tmp_path / "whole"
    assert summary.reused == ["facets (20 of 23 papers)", f"titles ({len(titles)} of 23)",
                              f"context ({in_both} of {len(items)})", "papers (20 of 23)"]
    recorded = Index.open(tmp_path / "part").manifest["stages"]["build"]["cache_from"]
    assert recorded == {"index": str(tmp_path / "whole"), "copied": summary.seeded}
    assert {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in other_cache.rglob("*")} == before
    build_index(part, tmp_path / "scratch", config)
    _assert_same_build(_built(tmp_path / "part"), _built(tmp_path / "scratch"))
    for name in ("facets.parquet", "embeddings/items.npy", "embeddings/papers.npy", "graph/problem.npz"):
        assert (tmp_path / "part" / name).read_bytes() == (tmp_path / "scratch" / name).read_bytes(), name

    # a second seeded build finds everything in its own stores: nothing more is copied
    again = build_index(part, tmp_path / "part", config, cache_from=tmp_path / "whole")
    assert again.seeded == {"facets": 0, "titles": 0, "context": 0, "papers": 0}
    assert again.reused == ["facets", "titles", "context", "papers"]
    with pytest.raises(GraftError, match="--cache-from and --fresh contradict"):
        build_index(part, tmp_path / "x", config, cache_from=tmp_path / "whole", fresh=True)
    with pytest.raises(GraftError, match="no build stores there"):
        build_index(part, tmp_path / "x", config, cache_from=tmp_path / "nowhere")
    with pytest.raises(GraftError, match="is the index being built"):
        build_index(part, tmp_path / "part", config, cache_from=tmp_path / "part")


def test_stored_rows_of_other_settings_or_cut_short_are_not_used(tmp_path, encoder) -> None:
    corpus = write_slice(cs768_path(), 30, tmp_path)
    out = tmp_path / "idx"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    cache = out / "cache" / "build"
    (cache / "papers" / "000000.json").unlink()  # killed while writing the papers' shard
    np.save(cache / "titles" / "000000.vectors.npy", np.zeros(3))  # replaced by other data
    summary = build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert summary.reused == ["facets", "context"]  # the damaged ones are made again and stored anew
    assert build_index(corpus, out, BuildConfig(), encoder=encoder).reused == ["facets", "titles", "context", "papers"]
    assert _store_files(out, "papers") == ["000000.json", "000000.parquet", "000000.vectors.npy"]
    (cache / "facets" / "000000.vectors.npy").write_bytes(b"not an array")  # a damaged file
    assert build_index(corpus, out, BuildConfig(), encoder=encoder).reused == ["titles", "context", "papers"]

    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    corpus.write_text("\n".join(json.dumps(r) for r in records[::-1]) + "\n")  # same papers, other order
    summary = build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert summary.reused == ["facets", "titles", "context", "papers"] and Index.open(out).paper_ids[0] == records[-1]["id"]
    other_model = CountingEncoder(encoder)
    other_model.batch_size = 8  # batches change the last bits of PyTorch's vectors: another setting
    assert build_index(corpus, out, BuildConfig(), encoder=other_model).reused == []
    for stage in ("facets", "titles", "context", "papers"):  # the first setting's shards are gone
        assert len(list((cache / stage).glob("*.json"))) == 1

    # checkpoints of earlier versions (files directly in cache/build) are removed
    (cache / "facets.00000.json").write_text("{}")
    build_index(corpus, out, BuildConfig(), encoder=other_model)
    assert not (cache / "facets.00000.json").exists()


def test_stored_facets_follow_the_code_of_the_extractor_that_made_them(tmp_path, encoder, monkeypatch) -> None:
    import shutil

    import graphbuild.checkpoints as ck
    from graphbuild.build import EXTRACTOR_SOURCES

    code = tmp_path / "code"  # a copy of the sources the keys are made of, to edit
    for rel in {f for files in EXTRACTOR_SOURCES.values() for f in files}:
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ck._REPO_PACKAGES / rel, code / rel)
    monkeypatch.setattr(ck, "_REPO_PACKAGES", code)
    corpus = write_slice(cs768_path(), 12, tmp_path)
    out = tmp_path / "idx"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    with open(code / "graphbuild" / "facets_llm.py", "a") as fh:  # another extractor's code
        fh.write("\n# edited\n")
    assert build_index(corpus, out, BuildConfig(), encoder=encoder).reused == ["facets", "titles", "context", "papers"]
    with open(code / "graft" / "extract.py", "a") as fh:  # this extractor's code
        fh.write("\n# edited\n")
    assert build_index(corpus, out, BuildConfig(), encoder=encoder).reused == ["titles", "context", "papers"]


def test_a_rebuild_says_which_later_stages_of_the_old_graph_it_removed(tmp_path, encoder) -> None:
    """DocIDs and pairs without a model, and exports, are removed (and said so before and after);
    a model moves aside with its DocIDs (tests/test_rebuild.py has a trained one)."""
    from rich.console import Console

    from cli.app import print_build_summary

    corpus = write_slice(cs768_path(), 20, tmp_path)
    out = tmp_path / "idx"
    assert build_index(corpus, out, BuildConfig(), encoder=encoder).removed == []
    (out / "docids").mkdir()  # what `graft train` left for the old graph before it trained
    (out / "docids" / "file").write_text("x")
    (out / "graph.graphml").write_text("<graphml/>")  # `graft export`'s default file, of the old graph
    (out / "graph.txt").write_text("the user's")
    notes: list[str] = []
    summary = build_index(corpus, out, BuildConfig(), encoder=encoder, on_note=notes.append)
    assert notes == [f"docids of the graph this build replaces will be removed when the new index is written "
                     f"(`graft train {out}` makes them again); graph.graphml (`graft export`'s, of the old graph) "
                     "will be removed"]
    assert summary.removed == ["docids", "graph.graphml"] and summary.kept is None and not (out / "docids").exists()
    assert not (out / "graph.graphml").exists() and (out / "graph.txt").read_text() == "the user's"
    console = Console(record=True, width=1000)  # the message names the index twice: no wrap for a long tmp path
    print_build_summary(summary, console)
    assert f"removed docids, graph.graphml of the graph this build replaced: `graft train {out}` trains the " \
        f"generative retriever on the new one; `graft export {out}` exports it" in console.export_text()
    for stage in ("docids", "model"):  # a model (as far as a rebuild looks) is kept with its DocIDs
        (out / stage).mkdir()
        (out / stage / "file").write_text(stage)
    summary = build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert summary.removed == [] and summary.kept is not None and summary.kept.name.startswith("model.previous-")
    assert (summary.kept / "model" / "file").read_text() == "model" and not (out / "model").exists()
    assert (summary.kept / "docids" / "file").read_text() == "docids"


def test_build_writes_only_into_a_new_empty_or_index_folder(tmp_path, encoder) -> None:
    """--out must be new, empty or an index: a folder of other files (whose `model/` the build would
    take for an old graph's) or a file is refused before any work, and a corpus that fails to load
    leaves no folder behind. An index whose manifest is damaged is rebuilt in place."""
    from graft.errors import GraftError
    from graft.manifest import manifest_path

    corpus = write_slice(cs768_path(), 20, tmp_path)
    project = tmp_path / "project"
    (project / "model").mkdir(parents=True)
    (project / "model" / "weights.bin").write_text("trained elsewhere")
    with pytest.raises(GraftError, match="holds files but no GRAFT index"):
        build_index(corpus, project, BuildConfig(), encoder=encoder)
    assert (project / "model" / "weights.bin").read_text() == "trained elsewhere"
    (project / "manifest.json").write_text(json.dumps({"format": "web-app", "name": "x"}))
    with pytest.raises(GraftError, match="its manifest.json is not a GRAFT index's"):
        build_index(corpus, project, BuildConfig(), encoder=encoder)
    with pytest.raises(GraftError, match="is a file"):
        build_index(corpus, corpus, BuildConfig(), encoder=encoder)
    with pytest.raises(GraftError, match="lies under .*, which is a file"):
        build_index(corpus, corpus / "index", BuildConfig(), encoder=encoder)
    with pytest.raises(GraftError):
        build_index(tmp_path / "no-such-corpus.jsonl", tmp_path / "new", BuildConfig(), encoder=encoder)
    # the encoder's device is checked before the corpus loads or the folder is made
    with pytest.raises(GraftError, match="device 'gpu' is unknown"):
        build_index(corpus, tmp_path / "on-gpu", BuildConfig(embedding_device="gpu"))
    assert not (tmp_path / "on-gpu").exists()
    assert not (tmp_path / "new").exists()
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / ".graft-lock").write_text("")  # left by a build stopped before it wrote anything

    out = tmp_path / "locked"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    want = Index.open(out).query(paper=Index.open(out).paper_ids[0], retriever="teacher").trec_lines()
    for damaged in ('{"format": "graft-index", "stag', "[1]"):
        manifest_path(out).write_text(damaged)
        with pytest.raises(IndexFormatError):
            Index.open(out)
        build_index(corpus, out, BuildConfig(), encoder=encoder)
        idx = Index.open(out)
        assert idx.query(paper=idx.paper_ids[0], retriever="teacher").trec_lines() == want
    good = manifest_path(out).read_text()
    for shape in ('{"format": "graft-index", "format_version": 1, "stages": "build"}',
                  '{"format": "graft-index", "format_version": 1, "stages": {"build": null}}'):
        manifest_path(out).write_text(shape)
        with pytest.raises(IndexFormatError, match="not a GRAFT manifest"):
            Index.open(out)
    manifest_path(out).write_text(good)
    # a damaged artefact is named, with the rebuild, instead of the reader's own error
    for rel in ("papers.parquet", "graph/method.npz"):
        whole = (out / rel).read_bytes()
        (out / rel).write_bytes(whole[: len(whole) // 3])
        with pytest.raises(IndexFormatError, match=f"{rel} cannot be read .*rebuild the index"):
            idx = Index.open(out)
            idx.query(paper="x" if rel == "papers.parquet" else idx.paper_ids[0], retriever="teacher")
        (out / rel).write_bytes(whole)


def test_a_failed_rebuild_leaves_the_old_index_and_its_model_whole(tmp_path, encoder) -> None:
    """A rebuild that fails on its input, or stops before it writes, keeps the old graph and model."""
    from graft.errors import GraftError

    corpus = write_slice(cs768_path(), 20, tmp_path)
    out = tmp_path / "idx"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    (out / "model").mkdir()
    (out / "model" / "weights").write_text("trained")
    before = {p.name: p.read_bytes() for p in (out / "graph").iterdir()}

    with pytest.raises(GraftError):
        build_index(tmp_path / "no-such-corpus.jsonl", out, BuildConfig(), encoder=encoder)

    class Stops(CountingEncoder):  # a Ctrl-C part-way, in the encoder's second pass
        calls = 0

        def encode(self, texts, **kwargs):
            self.calls += 1
            if self.calls > 1:
                raise KeyboardInterrupt
            return super().encode(texts, **kwargs)

    edited = tmp_path / "edited.jsonl"
    edited.write_text(corpus.read_text().replace('"title": "', '"title": "Edited: '))
    with pytest.raises(KeyboardInterrupt):
        build_index(edited, out, BuildConfig(), encoder=Stops(encoder), fresh=True)

    assert (out / "model" / "weights").read_text() == "trained"
    assert Index.open(out).n == 20
    assert {p.name: p.read_bytes() for p in (out / "graph").iterdir()} == before

    # the wrong corpus, stopped before the write: its 4 papers do not make the cache drop the index's 20
    import graphbuild.build as build_module

    other = tmp_path / "other"
    build_index(corpus, other, BuildConfig(), encoder=encoder)

    wrong = tmp_path / "wrong.jsonl"
    lines = gzip.open(cs768_path(), "rt").read().splitlines()
    wrong.write_text("\n".join(lines[100:104]) + "\n")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    original_graphs = build_module.facet_graphs
    build_module.facet_graphs = stopped
    try:
        with pytest.raises(KeyboardInterrupt):
            build_index(wrong, other, BuildConfig(), encoder=encoder)
    finally:
        build_module.facet_graphs = original_graphs
    assert Index.open(other).n == 20
    counting = CountingEncoder(encoder)
    assert build_index(corpus, other, BuildConfig(), encoder=counting).reused == ["facets", "titles", "context", "papers"]
    assert counting.texts == 0  # every paper served from the cache

    from graft.store import index_lock

    with index_lock(out, "graft train"):  # an index being trained is not rebuilt under the trainer
        with pytest.raises(GraftError, match=r"being written by `graft train` \(pid \d+"):
            build_index(edited, out, BuildConfig(), encoder=encoder)
    assert (out / "model" / "weights").read_text() == "trained"
    assert {p.name: p.read_bytes() for p in (out / "graph").iterdir()} == before


def test_aclsum_slice_builds_with_full_text(tmp_path, encoder) -> None:
    summary = build_index(None, tmp_path / "acl", BuildConfig(limit=25), encoder=encoder)
    idx = Index.open(tmp_path / "acl")
    assert idx.n == 25
    assert idx.manifest["corpus"]["source"] == "aclsum"
    assert summary.counts["dropped_references"] > 0  # most bibliography entries are outside ACLSum
    for facet in FACETS:
        assert idx.graphs[facet].nnz == 25 * 20


def test_a_build_on_the_onnx_backend_records_it_and_equals_the_torch_build(tmp_path, encoder) -> None:
    """BuildConfig.embedding_backend reaches the build's own encoder (none is passed in here), the
    manifest says which backend ran, and the index equals one built on torch: same items, vectors
    and edges (12 papers, so every candidate edge is kept and no near-tie can differ)."""
    build_index(None, tmp_path / "onnx", BuildConfig(limit=12, embedding_backend="onnx"))
    build_index(None, tmp_path / "torch", BuildConfig(limit=12), encoder=encoder)
    a, b = Index.open(tmp_path / "onnx"), Index.open(tmp_path / "torch")
    assert a.manifest["embedding"]["backend"] == "onnx" and b.manifest["embedding"]["backend"] == "torch"
    assert a.manifest["stages"]["build"]["config"]["embedding_backend"] == "onnx"
    assert a.facets.equals(b.facets)
    for name in ("items", "papers"):
        np.testing.assert_allclose(np.load(tmp_path / "onnx" / "embeddings" / f"{name}.npy").astype(np.float32),
                                   np.load(tmp_path / "torch" / "embeddings" / f"{name}.npy").astype(np.float32),
                                   atol=1e-3)
    for facet in FACETS:
        ga, gb = a.graphs[facet], b.graphs[facet]
        assert ga.nnz == gb.nnz == 12 * 11
        assert abs(sp.csr_matrix(ga - gb)).max() < 1e-4

    # experiments/index_agreement.py says the same of these two, and counts a cut graph's edges
    from experiments.index_agreement import agreement, main

    assert main([str(tmp_path / "onnx"), str(tmp_path / "torch"), "--results", str(tmp_path / "res")]) == 0
    same = json.loads((tmp_path / "res" / "index_agreement.json").read_text())
    assert same["meta"]["facet_items_equal"] and same["meta"]["max_item_vector_diff"] < 1e-3
    assert all(r["shared_share"] == r["rows_identical_share"] == 1.0 and r["max_weight_diff"] < 1e-4
               for r in same["rows"])
    build_index(None, tmp_path / "k5", BuildConfig(limit=12, top_k=5), encoder=encoder)
    cut, full = agreement(tmp_path / "k5", tmp_path / "torch"), agreement(tmp_path / "torch", tmp_path / "k5")
    for facet in FACETS:
        assert cut["facets"][facet]["shared_share"] == 1.0 and cut["facets"][facet]["rows_identical_share"] == 0.0
        assert full["facets"][facet]["shared_share"] == pytest.approx(5 / 11)
        assert cut["facets"][facet]["max_weight_diff"] == 0.0  # the same graph's weights, cut
    build_index(None, tmp_path / "other", BuildConfig(limit=11), encoder=encoder)
    with pytest.raises(ValueError, match="different papers"):
        agreement(tmp_path / "other", tmp_path / "torch")

    # a rebuild from the checkpoints makes no vectors (its "auto" encoder stays on torch) and still
    # names the backend that made them; new vectors beside reused ones name both
    summary = build_index(None, tmp_path / "onnx", BuildConfig(limit=12, top_k=5))
    assert sorted(summary.reused) == ["context", "facets", "papers", "titles"]
    assert Index.open(tmp_path / "onnx").manifest["embedding"]["backend"] == "onnx"
    (tmp_path / "onnx" / "cache" / "build" / "titles" / "000000.json").unlink()  # the titles made again, on torch
    summary = build_index(None, tmp_path / "onnx", BuildConfig(limit=12), encoder=encoder)
    assert "titles" not in summary.reused and "facets" in summary.reused
    assert Index.open(tmp_path / "onnx").manifest["embedding"]["backend"] == "onnx+torch"


def test_item_rows_align_facets_with_papers(cs768_index) -> None:
    idx = Index.open(cs768_index[0])
    rows = idx.item_rows
    assert len(rows) == idx.facets.height
    assert [idx.paper_ids[r] for r in rows[:50]] == idx.facets["paper_id"].to_list()[:50]
    # a paper's items of a facet, in the order the facets table holds them (no per-paper table made)
    table = idx.facets.select("paper_id", "facet").with_row_index("row")
    for pid in idx.paper_ids[:40]:
        for facet in FACETS:
            want = table.filter((pl.col("paper_id") == pid) & (pl.col("facet") == facet))["row"].to_list()
            assert idx.item_rows_of(pid, facet).tolist() == want
    assert sum(len(idx.item_rows_of(p, "method")) for p in idx.paper_ids) == int((idx.facets["facet"] == "method").sum())
    assert idx.item_rows_of("no such paper", "method").size == 0 and idx.item_rows_of(idx.paper_ids[0], "x").size == 0


def test_build_writes_title_and_abstract_embeddings_of_the_papers(cs768_index, encoder) -> None:
    from graft.text import paper_text

    out, summary = cs768_index
    idx = Index.open(out)
    vec = np.asarray(idx.paper_embeddings, dtype=np.float32)
    assert vec.shape == (idx.n, encoder.dim) and summary.counts["paper_embeddings"] == idx.n
    np.testing.assert_allclose(np.linalg.norm(vec, axis=1), 1.0, atol=2e-3)
    p = idx.papers
    for node in (0, 123, 399):  # node order: row i is papers.parquet's row i, "Title. Abstract"
        text = paper_text(p["title"][node], p["abstract"][node])
        assert text.startswith(" ".join(p["title"][node].split()) + ". ")
        np.testing.assert_allclose(vec[node], encoder.encode([text])[0], atol=2e-3)  # float16 on disk
    assert paper_text("Same text", "Same text") == "Same text" and paper_text("", "Only abstract") == "Only abstract"


def test_text_coupling_row_keeps_the_nearest_papers_clipped() -> None:
    from graft.external import text_coupling_row

    vecs = np.array([[1, 0], [0.8, 0.6], [0.6, 0.8], [0, 1], [-1, 0]], dtype=np.float32)
    query = np.array([1, 0], dtype=np.float32)
    row = text_coupling_row(vecs, query, 3)
    assert row.shape == (1, 5) and row.indices.tolist() == [0, 1, 2]
    np.testing.assert_allclose(row.data, [1.0, 0.8, 0.6], atol=1e-6)
    row = text_coupling_row(vecs, query, 3, exclude=0)  # the paper itself is never its own neighbour
    assert row.indices.tolist() == [1, 2]  # and paper 3's cosine of 0 carries nothing
    assert text_coupling_row(vecs, query, 5).indices.tolist() == [0, 1, 2]  # cosines <= 0 carry nothing
    assert text_coupling_row(vecs, query, 0).nnz == 0


def test_external_rows_of_a_paper_without_references_use_text_coupling(cs768_index, encoder, tmp_path) -> None:
    import shutil

    from graft.edges import external_facet_row
    from graft.external import TEXT_NEIGHBOURS, ExternalScorer, text_coupling_row
    from graft.similarity import group_items
    from graft.text import paper_text

    idx = Index.open(cs768_index[0])
    node = idx.row_of[idx.citations["citing"][0]]  # a paper with references, posed first without them
    row = idx.papers.row(node, named=True)
    record = {"id": "new", "title": row["title"], "abstract": row["abstract"]}
    coupled = ExternalScorer(idx, encoder=encoder, feedback=0)
    plain = ExternalScorer(idx, encoder=encoder, extractor=coupled.facets_of.extractor, text_neighbours=0, feedback=0)
    assert (coupled.text_neighbours, coupled.text_coupling_off) == (TEXT_NEIGHBOURS, None)
    assert (plain.text_neighbours, plain.text_coupling_off) == (0, "text_neighbours = 0")
    rows, facets = coupled.rows(record)
    zero, _ = plain.rows(record)
    # by hand: the citation half is beta x the clipped similarity with the 10 nearest papers by title +
    # abstract: their embeddings' cosine blended with their lexical rows' at the build's weight
    vec = encoder.encode([paper_text(row["title"], row["abstract"])])[0]
    papers = np.asarray(idx.paper_embeddings, dtype=np.float32)
    config = coupled.facets_of.config
    assert config.text_lexical_weight == 0.5 and config.lexical_weight == 0.5
    own_lexical = idx.lexicon.vectors([paper_text(row["title"], row["abstract"])])
    assert abs(own_lexical - idx.lexical["papers"][node]).max() < 1e-6  # the same text, the same row
    # a text's cosines with every paper come from its terms' postings (memory-mapped query files)
    assert (cs768_index[0] / "cache" / "query" / "postings" / "build.json").is_file()
    np.testing.assert_allclose(idx.lexical_cosines(own_lexical),
                               (idx.lexical["papers"] @ own_lexical.T).toarray().ravel(), atol=1e-6)
    by_words = (idx.lexical["papers"] @ own_lexical.T).toarray().ravel()
    cite = text_coupling_row(papers, vec, TEXT_NEIGHBOURS, lexical_sims=by_words,
                             lexical_weight=config.text_lexical_weight)
    dense_only = text_coupling_row(papers, vec, TEXT_NEIGHBOURS)
    assert cite.indices.tolist() != dense_only.indices.tolist() or not np.allclose(cite.data, dense_only.data)
    near = cite.indices.tolist()
    assert len(near) == TEXT_NEIGHBOURS and node in near  # the paper reads most like itself
    vectors = coupled.embed_items([record], [facets])[0]
    lexical = idx.lexicon.vectors([" ".join([row["title"] + ".", *facets[f]]) for f in FACETS])
    lexical = {f: lexical[j] for j, f in enumerate(FACETS)}  # its title and items of each facet
    assert all(abs(lexical[f] - got).max() < 1e-6 for f, got in coupled.lexical_rows([record], [facets])[0].items())
    raised = 0
    for f in FACETS:
        query = group_items(np.zeros(len(vectors[f]), dtype=np.int64), vectors[f], 1)
        query.lexical = lexical[f]
        expect = external_facet_row(query, coupled.items[f], cite, coupled.params)
        assert rows[f].indices.tolist() == expect.indices.tolist()
        np.testing.assert_allclose(rows[f].data, expect.data, atol=1e-6)
        # a nearest paper in both rows: its weight rose by beta x its cosine
        z, r = zero[f].toarray().ravel(), rows[f].toarray().ravel()
        for c in (c for c in near if z[c] > 0 and r[c] > 0):
            assert r[c] == pytest.approx(z[c] + coupled.params.beta * cite[0, c], abs=1e-5)
            raised += 1
    assert raised > 0
    # the feedback pass: the citation links of the 3 papers the first rows rank highest join the half
    from graft.external import FEEDBACK

    fed = ExternalScorer(idx, encoder=encoder, extractor=coupled.facets_of.extractor)
    assert fed.feedback == FEEDBACK == 3
    first = [idx.row_of[h.paper_id] for h in idx.query_rows(rows, k=3).hits]
    a_dense = idx.citation_matrix.toarray()
    linked = (a_dense + a_dense.T) > 0
    fed_cite = sp.csr_matrix(np.maximum(cite.toarray().ravel(), linked[first].mean(axis=0))[None, :].astype(np.float32))
    assert fed_cite.nnz > cite.nnz
    fed_rows, _ = fed.rows(record)
    for f in FACETS:
        query = group_items(np.zeros(len(vectors[f]), dtype=np.int64), vectors[f], 1)
        query.lexical = lexical[f]
        expect = external_facet_row(query, fed.items[f], fed_cite, fed.params)
        assert fed_rows[f].indices.tolist() == expect.indices.tolist()
        np.testing.assert_allclose(fed_rows[f].data, expect.data, atol=1e-6)
    # a record with references gets the pass too; its references are never among the first papers.
    # The reference posed is the first cited paper for which the pass changes a row: the first papers
    # are often link-less in this slice, or the papers their links raise stay below a facet's top K,
    # and then the comparison with the rows made by hand below could pass with the pass left out.
    for ref in idx.citations["cited"].unique(maintain_order=True).to_list():
        cited_record = {**record, "references": [ref]}
        with_refs, _ = fed.rows(cited_record)
        no_pass, _ = coupled.rows(cited_record)
        if any(with_refs[f].nnz != no_pass[f].nnz or (with_refs[f] != no_pass[f]).nnz for f in FACETS):
            break
    given = idx.row_of[cited_record["references"][0]]
    first = [idx.row_of[h.paper_id] for h in idx.query_rows(no_pass, k=3, exclude={given}).hits]
    assert len(first) == 3 and given not in first
    raised = coupled.citation_rows([cited_record])[0].maximum(sp.csr_matrix(linked[first].mean(axis=0)[None, :]))
    expect = coupled.rows_from(sp.csr_matrix(raised, dtype=np.float32), vectors, lexical=lexical)
    assert any(with_refs[f].nnz != no_pass[f].nnz or (with_refs[f] != no_pass[f]).nnz for f in FACETS)
    for f in FACETS:
        assert with_refs[f].indices.tolist() == expect[f].indices.tolist()
        np.testing.assert_allclose(with_refs[f].data, expect[f].data, atol=1e-6)
    with pytest.raises(Exception, match="feedback must be >= 0"):
        ExternalScorer(idx, encoder=encoder, feedback=-1)
    # with references into the corpus: per paper the largest of bibliographic coupling, the share of
    # the references it cites or is cited by, and text coupling
    from graft.citations import external_citation_row

    refs = idx.citations.filter(pl.col("citing") == row["paper_id"])["cited"].to_list()
    assert refs
    given = refs[:2] + ["not-in-the-corpus"]
    ref_rows = np.array(sorted(idx.row_of[r] for r in refs[:2]))
    bib = external_citation_row(idx.citation_matrix, ref_rows, coupled.coupling_row_log).toarray().ravel()
    links = linked[ref_rows].mean(axis=0)
    assert links.max() == 1.0 and set(np.flatnonzero(links == 1.0)) >= {node}  # cited by the paper
    text = cite.toarray().ravel()
    for scorer, expect_cite in ((coupled, np.maximum(np.maximum(bib, links), text)), (plain, np.maximum(bib, links))):
        got = scorer.citation_rows([{**record, "references": given}])[0].toarray().ravel()
        np.testing.assert_allclose(got, expect_cite, atol=1e-6)
    with_refs = {**record, "references": given}
    a, _ = coupled.rows(with_refs)
    expect_cite = sp.csr_matrix(np.maximum(np.maximum(bib, links), text)[None, :].astype(np.float32))
    for f in FACETS:
        query = group_items(np.zeros(len(vectors[f]), dtype=np.int64), vectors[f], 1)
        query.lexical = lexical[f]
        expect = external_facet_row(query, coupled.items[f], expect_cite, coupled.params)
        assert a[f].indices.tolist() == expect.indices.tolist()
        np.testing.assert_allclose(a[f].data, expect.data, atol=1e-6)
    # posed as a record under its own id, a corpus paper is never its own neighbour
    own = coupled.citation_rows([{**record, "id": row["paper_id"], "references": given}])[0]
    assert node not in own.indices.tolist() and own.nnz > 0
    # an index built before embeddings/papers.npy scores text-only papers as before, and says why
    shutil.copytree(cs768_index[0], tmp_path / "older")
    (tmp_path / "older" / "embeddings" / "papers.npy").unlink()
    older = ExternalScorer(Index.open(tmp_path / "older"), encoder=encoder, extractor=coupled.facets_of.extractor,
                           feedback=0)
    assert older.text_neighbours == 0 and "papers.npy" in older.text_coupling_off
    old_rows, _ = older.rows(record)
    for f in FACETS:
        assert old_rows[f].indices.tolist() == zero[f].indices.tolist()
    with pytest.raises(Exception, match="text_neighbours must be >= 0"):
        ExternalScorer(idx, encoder=encoder, text_neighbours=-1)


def test_corpus_paper_rows_with_the_feedback_pass(cs768_index) -> None:
    """CorpusScorer (no encoder): with R = 3, a corpus paper's citation score row raised to the share
    of the teacher's first 3 papers (stored rows) that each paper cites or is cited by, its facet rows
    scored again from its own items (`teacher-fb`; `graft query --paper --feedback 3`)."""
    from dataclasses import replace

    from graft.edges import external_facet_row
    from graft.external import FEEDBACK, CorpusScorer
    from graft.similarity import group_items

    idx = Index.open(cs768_index[0])
    assert CorpusScorer(idx).feedback == 0  # corpus papers: the stored rows by default
    scorer = CorpusScorer(idx, feedback=FEEDBACK, citation_weight=0)
    assert scorer.feedback == FEEDBACK == 3 and not hasattr(scorer, "encoder")
    cited = idx.citations["cited"].value_counts().sort(["count", "cited"], descending=[True, False])["cited"].to_list()
    node = idx.row_of[cited[0]]
    first = [idx.row_of[h.paper_id] for h in idx.query_paper(cited[0], k=3).hits]
    a = idx.citation_matrix.toarray()
    linked = (a + a.T) > 0
    by_hand = np.maximum(idx.citation_score.toarray()[node], linked[first].mean(axis=0))
    by_hand[node] = 0
    assert (by_hand > 0).sum() > (idx.citation_score.toarray()[node] > 0).sum()  # the pass adds papers
    rows = scorer.feedback_rows(node)
    owner, facet_col = idx.item_rows, idx.facets["facet"].to_numpy()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    wider = replace(scorer.params, top_k=scorer.params.top_k + 1)
    for f in FACETS:
        mine = (owner == node) & (facet_col == f)
        query = group_items(np.zeros(int(mine.sum()), dtype=np.int64), vectors[mine], 1)
        query.lexical = idx.lexical[f][node]  # its stored lexical row of the facet
        expect = external_facet_row(query, scorer.items[f], sp.csr_matrix(by_hand[None, :].astype(np.float32)),
                                    wider).toarray().ravel()
        expect[node] = 0
        keep = np.argsort(-expect, kind="stable")[: scorer.params.top_k]
        keep = keep[expect[keep] > 0]
        got = rows[f].toarray().ravel()
        assert node not in rows[f].indices and set(rows[f].indices) == set(keep.tolist())
        np.testing.assert_allclose(got[keep], expect[keep], atol=1e-6)
    result = scorer.query_paper(cited[0], k=20)
    walked = idx.query_rows(rows, query_id=cited[0], k=20, exclude={node})
    assert [h.paper_id for h in result.hits] == [h.paper_id for h in walked.hits]
    assert result.info["feedback"] == 3 and result.retriever == "teacher" and cited[0] not in {
        h.paper_id for h in result.hits}
    assert all(h.facets for h in result.hits)
    stored = [h.paper_id for h in idx.query_paper(cited[0], k=20).hits]
    assert [h.paper_id for h in result.hits] != stored  # the pass changes the ranking
    # R = 0: the rows scored again from the citation score row alone
    plain = CorpusScorer(idx, feedback=0).feedback_rows(node)
    again = scorer.paper_rows(node, idx.citation_score.tocsr()[node])
    for f in FACETS:
        np.testing.assert_array_equal(plain[f].toarray(), again[f].toarray())
    # nothing to add (R = 0, or no citation links in the index): the stored rows answer; without
    # links there is no citation channel either
    for quiet in (CorpusScorer(idx, feedback=0, citation_weight=0), CorpusScorer(idx, feedback=3)):
        if quiet.feedback:
            quiet.linked = sp.csr_matrix(quiet.linked.shape, dtype=np.float32)
        got = quiet.query_paper(cited[0], k=20)
        assert [h.paper_id for h in got.hits] == stored and got.info["feedback"] == 0
        assert all(h.citation is None for h in got.hits)
    with pytest.raises(Exception, match="feedback must be >= 0"):
        CorpusScorer(idx, feedback=-2)


def test_papers_without_citation_links_are_text_coupled_in_the_graph(cs768_index) -> None:
    """graph/text.npz holds the text coupling of exactly the link-less papers (10 nearest by title +
    abstract); their stored rows are what the query-time scorer gives from that row (`citation_half`),
    so the feedback pass starts from it too; old manifests read as built without it."""
    from graft.citations import TEXT_NEIGHBOURS, linkless_rows, text_coupling
    from graft.external import CorpusScorer

    idx = Index.open(cs768_index[0])
    config = BuildConfig.from_manifest(idx.manifest)
    assert config.text_coupling == TEXT_NEIGHBOURS == 10
    assert BuildConfig.from_dict({}).text_coupling == 0  # an index built before text coupling
    lonely = linkless_rows(idx.citation_matrix)
    assert 0 < len(lonely) < idx.n
    text = idx.text_coupling
    filled = np.flatnonzero(np.diff(text.indptr) > 0)
    assert set(filled.tolist()) == set(lonely.tolist())
    assert idx.manifest["stages"]["build"]["counts"]["text_coupled_papers"] == len(filled)
    np.testing.assert_allclose(text.toarray(), text_coupling(np.asarray(idx.paper_embeddings, np.float32),
                                                             lonely, 10, lexical=idx.lexical["papers"],
                                                             lexical_weight=config.text_lexical_weight).toarray(),
                               atol=1e-3)
    assert np.all(np.diff(text.indptr)[filled] == 10)
    linked = (idx.citation_matrix + idx.citation_matrix.T).tocsr()
    assert text.multiply(linked).nnz == 0 and idx.citation_score[lonely].nnz == 0
    scorer = CorpusScorer(idx, feedback=0, citation_weight=0)
    for node in lonely[:3]:
        half = idx.citation_half(node)
        np.testing.assert_array_equal(half.toarray(), text[node].toarray())
        rows = scorer.paper_rows(node, half)
        stored = {f: idx.graphs[f][node] for f in FACETS}  # its out-edges as built
        for f in FACETS:
            assert set(rows[f].indices) == set(stored[f].indices)
            np.testing.assert_allclose(rows[f].toarray(), stored[f].toarray(), atol=1e-3)
        assert any(set(text[node].indices) & set(stored[f].indices) for f in FACETS)


def test_build_without_paper_embeddings_leaves_text_coupling_off(tmp_path, encoder) -> None:
    from eval.ooc_facets import default_key
    from graft.external import ExternalScorer

    corpus = write_slice(cs768_path(), 30, tmp_path)
    out = tmp_path / "idx"
    build_index(corpus, out, BuildConfig(), encoder=encoder)
    assert (out / "embeddings" / "papers.npy").is_file()
    assert default_key(Index.open(out).manifest)["text_neighbours"] == 10
    assert default_key(Index.open(out).manifest)["feedback"] == 3
    with pytest.raises(ValueError, match="text_coupling needs paper_embeddings"):
        BuildConfig(paper_embeddings=False)
    summary = build_index(corpus, out, BuildConfig(paper_embeddings=False, text_coupling=0), encoder=encoder)
    assert not (out / "graph" / "text.npz").exists()
    assert "embed papers" not in summary.timings and summary.counts["paper_embeddings"] == 0
    idx = Index.open(out)  # the earlier build's vectors are gone with it
    assert not (out / "embeddings" / "papers.npy").exists() and idx.paper_embeddings is None
    assert default_key(idx.manifest)["text_neighbours"] == 0
    scorer = ExternalScorer(idx, encoder=encoder)
    assert scorer.text_neighbours == 0 and "papers.npy" in scorer.text_coupling_off


@pytest.mark.slow
def test_build_scale_benchmark_smoke(tmp_path) -> None:
    """experiments/build_scale.py on a cs768 slice: the stage table, the graph stage against the
    dense baseline, the rebuild from checkpoints, and the backend it was asked for in name and index."""
    from experiments.build_scale import main

    assert main(["--corpus", str(cs768_path()), "--index", str(tmp_path / "idx"), "--limit", "60",
                 "--encoder-backend", "torch", "--results", str(tmp_path)]) == 0
    text = (tmp_path / "build_scale_limit60_torch.md").read_text()
    assert "encoder backend torch" in text and "| **total** |" in text and "reused: facets, titles, context, papers" in text
    res = json.loads((tmp_path / "build_scale_limit60_torch.json").read_text())
    assert res["encoder_backend"] == "torch" and res["counts"]["papers"] == 60
    assert res["graph_stage_method"]["top20_overlap"] > 0.9
    assert Index.open(tmp_path / "idx").manifest["embedding"]["backend"] == "torch"


@pytest.mark.slow
def test_incremental_build_benchmark_smoke(tmp_path) -> None:
    """experiments/incremental_build.py on a cs768 slice: the newest papers held back, then added
    to the index, which then equals a build from scratch (the build's own encoder, ONNX Runtime)."""
    from experiments.incremental_build import main

    assert main(["--corpus", str(cs768_path()), "--limit", "30", "--added", "8", "--work", str(tmp_path / "work"),
                 "--results", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "incremental_build_limit30.json").read_text())
    base, grown, scratch, seeded = res["rows"]
    assert (base["papers"], grown["papers"], scratch["papers"], seeded["papers"]) == (22, 30, 30, 22)
    assert grown["reused"][:2] == ["facets (22 of 30 papers)", "titles (22 of 30)"]
    assert grown["reused"][2].startswith("context (") and grown["reused"][3] == "papers (22 of 30)"
    assert base["reused"] == scratch["reused"] == [] and grown["extractor"] == scratch["extractor"]
    assert seeded["reused"] == ["facets", "titles", "context", "papers"] and seeded["extractor"] == base["extractor"]
    assert seeded["copied"]["facets"] == seeded["copied"]["papers"] == 22 and base["copied"] == {}
    for agree in (res["meta"]["agreement"], res["meta"]["agreement_seeded"]):
        assert agree["facet_items_equal"] and agree["max_item_vector_diff"] == agree["max_paper_vector_diff"] == 0.0
        assert all(f["shared_share"] == f["rows_identical_share"] == 1.0 for f in agree["facets"].values())
    assert "| grown: the whole corpus, incremental | 30 |" in (tmp_path / "incremental_build_limit30.md").read_text()


def test_graph_scoring_benchmark_smoke(cs768_index, tmp_path) -> None:
    """experiments/graph_scoring.py on the 400-paper index: every way of scoring and ranking
    gives the index's graph, and the graph module is restored afterwards."""
    import graft.edges as graph
    from experiments.graph_scoring import WAYS, main

    kept = graph.score_gathered, graph._unique, graph._top_k_rows
    assert main(["--index", str(cs768_index[0]), "--facets", "method,result", "--rounds", "1",
                 "--results", str(tmp_path)]) == 0
    assert (graph.score_gathered, graph._unique, graph._top_k_rows) == kept
    res = json.loads((tmp_path / "graph_scoring.json").read_text())
    assert [(r["facet"], r["way"]) for r in res["rows"]] == [(f, w) for f in ("method", "result") for w in WAYS]
    for r in res["rows"]:
        assert r["edges_a"] == Index.open(cs768_index[0]).graphs[r["facet"]].nnz
        assert r["shared_share"] == r["rows_identical_share"] == 1.0 and r["max_weight_diff"] < 1e-5
        assert r["seconds"] > 0
    assert "| method | gathered, one sort each (graft build) |" in (tmp_path / "graph_scoring.md").read_text()


def test_graph_scale_benchmark_smoke(cs768_index, tmp_path) -> None:
    """experiments/graph_scale.py on 500 real sentence vectors and the 400-paper index: the
    argpartition selection finds the same candidates as best_columns, the IVF index with every list
    probed finds the exact ones too and with one list fewer of them, every way of scoring pairs gives
    the same similarities, and the graph module is restored afterwards."""
    import graft.edges as graph
    from experiments.graph_scale import main

    kept = graph.prefilter_blocks
    assert main(["--index", str(cs768_index[0]), "--work", str(tmp_path / "work"), "--limit-texts", "500",
                 "--sizes", "300,600", "--probes", f"1,{round(2 * 600 ** 0.5)}", "--graph-probe", "2",
                 "--scoring-sizes", "100,250", "--all-items-max", "100", "--results", str(tmp_path)]) == 0
    assert graph.prefilter_blocks is kept
    res = json.loads((tmp_path / "graph_scale.json").read_text())
    assert res["meta"]["points"] == 900  # 500 sentences + the index's 400 papers
    by = {(r["n"], r["method"].split(",")[0], r["method"].split(", ")[-1]): r for r in res["rows"]}
    for n in (300, 600):
        assert by[(n, "exact", "np.argpartition (before)")]["recall100"] == 1.0
    assert by[(600, "ivf", f"{round(2 * 600 ** 0.5)} probed")]["recall100"] > 0.999  # all lists: exact
    assert by[(600, "ivf", "1 probed")]["recall100"] < 0.9
    graphs = res["meta"]["graph"]
    assert [g["facet"] for g in graphs] == ["problem", "method", "result", "contribution"]
    assert all(0.5 < g["shared_share"] <= 1.0 and g["edges_a"] > 0 for g in graphs)
    scoring = [(r["papers"], r["way"]) for r in res["meta"]["scoring"]]
    assert scoring == [(100, "gathered (graft build)"), (100, "pairs"), (100, "all items"),
                       (250, "gathered (graft build)"), (250, "pairs")]
    assert all(r["pairs"] == r["papers"] * min(100, r["papers"] - 1) and r["max_diff"] < 1e-5
               for r in res["meta"]["scoring"])
    assert "| 600 | exact, best_columns (graft build) |" in (tmp_path / "graph_scale.md").read_text()


def test_facet_edges_blend_the_items_cosine_with_their_words_and_lexical_off_builds_without(cs768_index, encoder,
                                                                                             tmp_path) -> None:
    """A facet edge's weight is alpha x ((1 - λ) x the items' mean best-match cosine + λ x the cosine of
    the two papers' lexical rows of the facet, their title and items' TF-IDF) + beta x citation score;
    the lexicon and rows the build stored are the ones a query reads. Lexical weights 0 build as before
    (no lexicon, the items' cosine alone) and remove an earlier build's lexical files."""
    from graft.lexical import LEXICAL_WEIGHT, LEXICON_FILE, Lexicon, facet_texts, lexical_file
    from graft.similarity import group_items, score_pairs
    from graft.text import paper_texts

    out = cs768_index[0]
    idx = Index.open(out)
    config = BuildConfig.from_manifest(idx.manifest)
    lam = config.lexical_weight
    assert lam == LEXICAL_WEIGHT and idx.manifest["stages"]["build"]["counts"]["lexicon_terms"] == idx.lexicon.size > 1000
    lexicon = Lexicon.fit(paper_texts(idx.papers))  # fitted again from the corpus: the same terms
    assert lexicon.terms == idx.lexicon.terms and np.allclose(lexicon.idf, idx.lexicon.idf)
    joined = facet_texts(idx.paper_column("title").to_list(), idx.item_rows, idx.facets["facet"].to_numpy(),
                         idx.facets["text"].to_list(), idx.n)
    owner, facet_col = idx.item_rows, idx.facets["facet"].to_numpy()
    vectors = np.asarray(idx.item_embeddings, dtype=np.float32)
    cite = idx.citation_score.maximum(idx.text_coupling)
    lexical_mattered = 0
    for f in FACETS:
        rows = lexicon.vectors(joined[f])
        assert abs(rows - idx.lexical[f]).max() < 1e-6
        g = idx.graphs[f].tocoo()
        pick = np.arange(0, g.nnz, max(1, g.nnz // 40))
        r, c = g.row[pick].astype(np.int64), g.col[pick].astype(np.int64)
        items = group_items(owner[facet_col == f], vectors[facet_col == f], idx.n)
        dense = score_pairs(items, r, items, c)
        words = np.array([(rows[i] @ rows[j].T).toarray()[0, 0] for i, j in zip(r, c)])
        cites = np.asarray(cite[r, c]).ravel()
        want = config.alpha * np.clip((1 - lam) * dense + lam * words, 0, 1) + config.beta * cites
        np.testing.assert_allclose(g.data[pick], want, atol=1e-4)  # items.npy is float16: the build scored float32
        lexical_mattered += int((np.abs(want - (config.alpha * np.clip(dense, 0, 1) + config.beta * cites)) > 0.01).sum())
    assert lexical_mattered > 20

    corpus = write_slice(cs768_path(), 60, tmp_path)
    build_index(corpus, tmp_path / "idx", BuildConfig(), encoder=encoder)
    assert (tmp_path / "idx" / LEXICON_FILE).is_file()
    build_index(corpus, tmp_path / "idx", BuildConfig(lexical_weight=0.0, text_lexical_weight=0.0), encoder=encoder)
    plain = Index.open(tmp_path / "idx")
    assert plain.lexicon is None and plain.lexical == {}
    assert not (tmp_path / "idx" / LEXICON_FILE).exists()
    assert not any((tmp_path / "idx" / lexical_file(f)).exists() for f in (*FACETS, "papers"))
    assert plain.manifest["stages"]["build"]["counts"]["lexicon_terms"] == 0
    g = plain.graphs["method"].tocoo()
    owner, facet_col = plain.item_rows, plain.facets["facet"].to_numpy()
    items = group_items(owner[facet_col == "method"], np.asarray(plain.item_embeddings, np.float32)[facet_col == "method"],
                        plain.n)
    cites = np.asarray(plain.citation_score.maximum(plain.text_coupling)[g.row, g.col]).ravel()
    np.testing.assert_allclose(g.data, 0.75 * np.clip(score_pairs(items, g.row, items, g.col), 0, 1) + 0.25 * cites,
                               atol=1e-4)
    old = dict(plain.manifest["stages"]["build"]["config"])
    del old["lexical_weight"], old["text_lexical_weight"]  # an index built before lexical similarity
    assert (BuildConfig.from_dict(old).lexical_weight, BuildConfig.from_dict(old).text_lexical_weight) == (0.0, 0.0)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="lexical_weight must lie in"):
            BuildConfig(lexical_weight=bad)
    # a damaged lexicon is named, with the rebuild
    build_index(corpus, tmp_path / "idx", BuildConfig(), encoder=encoder)
    pl.DataFrame({"term": ["b", "a"], "idf": [1.0, 1.0]}).write_parquet(tmp_path / "idx" / LEXICON_FILE)
    with pytest.raises(IndexFormatError, match="lexicon.parquet cannot be read"):
        Index.open(tmp_path / "idx").lexicon  # noqa: B018
