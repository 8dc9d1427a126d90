"""Approximate candidates (graft.ann): the FAISS IVF and HNSW paths against the exact prefilter they replace."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from graft.ann import (
    CandidateSearch,
    HNSWCandidates,
    IVFCandidates,
    candidate_blocks,
    graph_searcher,
    searcher_from_bytes,
)
from graft.build_config import BuildConfig
from graft.edges import GraphParams, external_facet_row, facet_graph
from graft.errors import ConfigError, GraftError
from graft.similarity import group_items, prefilter_blocks


def clustered(n: int, d: int = 64, clusters: int = 80, noise: float = 1.0, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres (embeddings of a corpus cluster by topic as these do)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(clusters, d))[rng.integers(0, clusters, n)] + noise * rng.normal(size=(n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def exact(x: np.ndarray, c: int = 100) -> np.ndarray:
    return np.vstack([cand for _, cand in prefilter_blocks(x, x, c)])


def approximate(x: np.ndarray, search: CandidateSearch, c: int = 100) -> np.ndarray:
    return np.vstack([cand for _, cand in candidate_blocks(x, x, c, graph_searcher(x, search))])


def assert_equal_up_to_near_ties(x: np.ndarray, got: np.ndarray, want: np.ndarray) -> None:
    """Rows equal, but where two candidates' cosines differ by less than float32 rounding (the two
    paths sum the products in another order): there they may trade places."""
    for r in np.flatnonzero((got != want).any(axis=1)):
        np.testing.assert_allclose(x[got[r]] @ x[r], x[want[r]] @ x[r], atol=1e-6)


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return clustered(3000)


@pytest.fixture(scope="module")
def exact_candidates(vectors) -> np.ndarray:
    return exact(vectors)


def test_default_probes_keep_the_exact_top_20(vectors, exact_candidates) -> None:
    got = approximate(vectors, CandidateSearch("faiss"))
    assert got.shape == exact_candidates.shape == (3000, 100)
    share = np.mean([len(set(g[:20]) & set(w[:20])) / 20 for g, w in zip(got, exact_candidates)])
    assert 0.97 <= share < 1  # approximate: some of the exact top 20 are missed
    assert not (got == np.arange(3000)[:, None]).any()  # never a paper's own row


def test_hnsw_keeps_the_exact_top_20_and_the_same_vectors_give_the_same_graph(vectors, exact_candidates) -> None:
    search = CandidateSearch("hnsw")
    got = approximate(vectors, search)
    assert got.shape == exact_candidates.shape == (3000, 100)
    share = np.mean([len(set(g[:20]) & set(w[:20])) / 20 for g, w in zip(got, exact_candidates)])
    assert 0.97 <= share < 1
    assert not (got == np.arange(3000)[:, None]).any()
    # inserted one thread at a time: a second graph of the same vectors answers alike
    np.testing.assert_array_equal(approximate(vectors, search), got)
    # fewer entries kept while searching find fewer of the exact candidates
    narrow = approximate(vectors, CandidateSearch("hnsw", hnsw_ef=1, hnsw_m=4))
    assert np.mean([len(set(g[:20]) & set(w[:20])) / 20 for g, w in zip(narrow, exact_candidates)]) < share


def test_a_searcher_sent_as_bytes_searches_alike(vectors) -> None:
    for search in (CandidateSearch("faiss", nprobe=4), CandidateSearch("hnsw")):
        made = graph_searcher(vectors, search)
        back = searcher_from_bytes(vectors, search, made.to_bytes())
        assert type(back) is type(made)
        np.testing.assert_array_equal(back.search(vectors[:50], 100, self_rows=np.arange(50)),
                                      made.search(vectors[:50], 100, self_rows=np.arange(50)))
    assert isinstance(graph_searcher(vectors, CandidateSearch("hnsw")), HNSWCandidates)
    assert graph_searcher(vectors, CandidateSearch("exact")) is None


def test_every_list_probed_is_the_exact_search(vectors, exact_candidates) -> None:
    search = CandidateSearch("faiss", nprobe=10**6)
    assert_equal_up_to_near_ties(vectors, approximate(vectors, search), exact_candidates)


def test_short_lists_fall_back_to_exact_rows() -> None:
    # 40 vectors, 6 lists, one probed: a list holds fewer than the 30 candidates asked for
    x = clustered(40, d=16, clusters=6, noise=0.1)
    got = approximate(x, CandidateSearch("faiss", nprobe=1, lists=6), c=30)
    assert_equal_up_to_near_ties(x, got, exact(x, 30))


def test_graph_and_external_rows_with_every_list_probed_equal_the_exact_ones(vectors) -> None:
    n = 600
    rng = np.random.default_rng(1)
    owner = np.sort(rng.integers(0, n, 1800))
    items = group_items(owner, vectors[:1800], n)
    cite = sp.random(n, n, density=0.01, random_state=2, dtype=np.float32, format="csr")
    links = (cite > 0).astype(np.float32)
    full = GraphParams(candidates=CandidateSearch("faiss", nprobe=10**6))
    g_exact, g_faiss = facet_graph(items, cite, links, GraphParams()), facet_graph(items, cite, links, full)
    # the same edges; weights alike to float32 rounding (a near tie at the 100th candidate changes
    # which pairs are scored together, and so the order of the sums)
    assert g_exact.nnz == g_faiss.nnz > 0
    assert ((g_exact > 0) != (g_faiss > 0)).nnz == 0 and abs(g_exact - g_faiss).max() < 1e-6
    searcher = IVFCandidates(items.pooled, full.candidates)
    query = group_items(np.zeros(3, dtype=np.int64), vectors[2000:2003], 1)
    row = sp.csr_matrix((1, n), dtype=np.float32)
    want = external_facet_row(query, items, row, GraphParams())
    got = external_facet_row(query, items, row, full, searcher)
    assert want.nnz == 20 and ((want > 0) != (got > 0)).nnz == 0 and abs(want - got).max() < 1e-6


def test_index_written_and_read_back_searches_alike(vectors, tmp_path) -> None:
    search = CandidateSearch("faiss", nprobe=4)
    made = IVFCandidates(vectors, search)
    made.write(tmp_path / "graph" / "ann_method.faiss")
    read = IVFCandidates.read(tmp_path / "graph" / "ann_method.faiss", vectors, search)
    assert read.lists == made.lists == round(2 * 3000 ** 0.5)
    np.testing.assert_array_equal(read.search(vectors[:50], 100), made.search(vectors[:50], 100))
    with pytest.raises(GraftError, match="holds 3000 vectors"):
        IVFCandidates.read(tmp_path / "graph" / "ann_method.faiss", vectors[:10], search)
    (tmp_path / "junk.faiss").write_bytes(b"not an index")
    with pytest.raises(GraftError, match="not a readable FAISS index"):
        IVFCandidates.read(tmp_path / "junk.faiss", vectors, search)


def test_settings_resolve_by_size_and_old_manifests_read_exact() -> None:
    auto = BuildConfig().graph_params().candidates
    assert auto.method == "auto" and auto.resolve(49_999) == "exact" and auto.resolve(50_000) == "hnsw"
    assert BuildConfig(candidates="faiss", faiss_nprobe=32).graph_params().candidates == CandidateSearch(
        "faiss", nprobe=32)
    assert BuildConfig.from_dict({}).candidates == "exact"  # built before approximate candidates
    assert BuildConfig.from_dict({}).linked_candidates == 0  # built before the linked candidates were capped
    assert BuildConfig().graph_params().linked_candidates == 100
    assert BuildConfig.from_dict({"candidates": "faiss"}).candidates == "faiss"
    hnsw = BuildConfig(candidates="hnsw", hnsw_ef=200).graph_params().candidates
    assert hnsw.resolve(10) == "hnsw" and hnsw.hnsw_ef == 200
    with pytest.raises(ConfigError, match="candidates 'ivf' is unknown; allowed: auto, exact, faiss, hnsw"):
        BuildConfig(candidates="ivf")
    with pytest.raises(ConfigError, match="hnsw_ef=0"):
        BuildConfig(hnsw_ef=0)
    with pytest.raises(ConfigError, match="faiss_nprobe=0"):
        BuildConfig(faiss_nprobe=0)
    with pytest.raises(ConfigError, match="nprobe=0"):
        CandidateSearch("faiss", nprobe=0)
    assert CandidateSearch(lists=500).n_lists(100) == 100 and CandidateSearch().n_lists(6545) == 162


def test_cli_refuses_an_unknown_candidate_method(tmp_path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    res = CliRunner().invoke(app, ["build", "aclsum", "--out", str(tmp_path / "idx"), "--candidates", "ivf"])
    assert res.exit_code != 0
    assert "candidates 'ivf' is unknown; allowed: auto, exact, faiss, hnsw" in " ".join(res.output.split())
    assert not (tmp_path / "idx").exists()


def test_ann_growth_benchmark_smoke(vectors, tmp_path) -> None:
    """experiments/ann_growth.py on clustered vectors at two sizes: each index's make and search
    times, recall against the exact top 100, and growth exponents, as a table."""
    from experiments.ann_growth import main

    np.save(tmp_path / "v.npy", vectors)
    assert main(["--vectors", str(tmp_path / "v.npy"), "--sizes", "1000,3000", "--queries", "100",
                 "--probes", "1000", "--ef", "128", "--results", str(tmp_path)]) == 0
    text = (tmp_path / "ann_growth.md").read_text()
    assert "| 3,000 | HNSW, M 16, efSearch 128 |" in text and "- IVF-Flat: b =" in text
    import json

    rows = json.loads((tmp_path / "ann_growth.json").read_text())["rows"]
    ivf = [r for r in rows if r["method"].startswith("IVF")]
    assert len(rows) == 4 and all(r["recall100"] > 0.999 for r in ivf)  # every list probed: exact
    assert all(0.9 < r["recall20"] <= 1 for r in rows)
