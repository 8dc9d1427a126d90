from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from graft.citations import (
    citation_links,
    citation_matrix,
    citation_signals,
    linkless_rows,
    text_coupling,
)
from graft.edges import (
    GraphParams,
    external_facet_row,
    facet_graph,
    facet_graph_rows,
    graph_from_rows,
    graph_row_ranges,
    strongest_per_row,
)
from graft.similarity import (
    best_columns,
    group_items,
    pair_similarity,
    prefilter_blocks,
    score_gathered,
    score_pairs,
)


def random_items(rng: np.random.Generator, n: int, d: int = 16, max_items: int = 4):
    counts = rng.integers(1, max_items + 1, size=n)
    counts[rng.integers(0, n)] = 0  # one paper without items in this facet
    owner = np.repeat(np.arange(n), counts)
    rng.shuffle(owner)  # items need not arrive grouped
    vecs = rng.normal(size=(len(owner), d)).astype(np.float32)
    # a shared direction makes similarities mostly positive, as with real sentence embeddings
    vecs += 1.5 * rng.normal(size=(1, d)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return owner, vecs


def dense_similarity(owner: np.ndarray, vecs: np.ndarray, n: int) -> np.ndarray:
    """Reference: symmetric mean best-match cosine, pair by pair."""
    groups = [vecs[owner == i] for i in range(n)]
    s = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(n):
            a, b = groups[i], groups[j]
            if len(a) == 0 or len(b) == 0:
                continue
            m = a @ b.T
            s[i, j] = 0.5 * (m.max(axis=1).mean() + m.max(axis=0).mean())
    return s


def dense_top_k(w: np.ndarray, k: int) -> sp.csr_matrix:
    n = w.shape[0]
    w = w.copy()
    np.fill_diagonal(w, 0)
    rows, cols, vals = [], [], []
    for i in range(n):
        order = np.lexsort((np.arange(n), -w[i]))  # by weight desc, then column
        kept = [j for j in order[:k] if w[i, j] > 0]
        rows += [i] * len(kept)
        cols += kept
        vals += [w[i, j] for j in kept]
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


@pytest.mark.parametrize("block_rows", [1, 8, 100])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_blocked_top_k_equals_dense_argsort(seed: int, block_rows: int, monkeypatch) -> None:
    """The candidates scored a row, a few rows (the default) or every row at a time."""
    import graft.edges as graph

    monkeypatch.setattr(graph, "score_gathered", lambda items, rows, cols: score_gathered(
        items, rows, cols, block_rows=block_rows))
    rng = np.random.default_rng(seed)
    n = 60
    owner, vecs = random_items(rng, n)
    edges = rng.random((n, n)) < 0.05
    a = citation_matrix(*np.nonzero(edges), n)
    sig = citation_signals(a)
    links = citation_links(a, sig.score)
    params = GraphParams(top_k=7, n_candidates=n, block_rows=9)  # several blocks, exact candidates
    got = facet_graph(group_items(owner, vecs, n), sig.score, links, params)
    s = dense_similarity(owner, vecs, n)
    want = dense_top_k(0.75 * np.clip(s, 0, 1) + 0.25 * sig.score.toarray(), 7)
    assert (got != 0).sum() == (want != 0).sum()
    np.testing.assert_array_equal((got != 0).toarray(), (want != 0).toarray())
    np.testing.assert_allclose(got.toarray(), want.toarray(), atol=1e-5)
    assert np.all(np.diff(got.indptr) <= 7)


@pytest.mark.parametrize("candidates", ["exact", "faiss", "hnsw"])
def test_a_graph_made_in_row_ranges_equals_the_whole_graph(candidates: str) -> None:
    """A distributed build's graph stage: ranges of whole candidate blocks, computed apart and put
    together, give the very graph (same edges, same float32 weights) the whole build gives."""
    from graft.ann import CandidateSearch, graph_searcher

    rng = np.random.default_rng(5)
    n = 90
    owner, vecs = random_items(rng, n)
    a = citation_matrix(*np.nonzero(rng.random((n, n)) < 0.04), n)
    sig = citation_signals(a)
    links = citation_links(a, sig.score)
    params = GraphParams(top_k=6, n_candidates=12, block_rows=8,
                         candidates=CandidateSearch(method=candidates, nprobe=2))
    items = group_items(owner, vecs, n)
    searcher = graph_searcher(items.pooled, params.candidates)
    whole = facet_graph(items, sig.score, links, params, searcher=searcher)
    ranges = graph_row_ranges(n, params, 4)
    assert ranges[0][0] == 0 and ranges[-1][1] == n and all(s % 8 == 0 for s, _ in ranges)
    assert all(b[0] == a_[1] for a_, b in zip(ranges, ranges[1:])) and len(ranges) == 4
    parts = [facet_graph_rows(items, sig.score, links, params, s, e, searcher=searcher) for s, e in reversed(ranges)]
    got = graph_from_rows(n, parts[::-1])
    assert whole.nnz > 0 and (got != whole).nnz == 0
    np.testing.assert_array_equal(got.indptr, whole.indptr)
    np.testing.assert_array_equal(got.indices, whole.indices)
    np.testing.assert_array_equal(got.data, whole.data)
    assert graph_row_ranges(0, params, 3) == [] and graph_row_ranges(5, params, 3) == [(0, 5)]


def test_citation_signals_from_row_blocks_of_counts_are_the_whole_ones() -> None:
    import scipy.sparse as sp

    from graft.citations import link_count_rows

    rng = np.random.default_rng(3)
    n = 70
    edges = rng.random((n, n)) < 0.06
    np.fill_diagonal(edges, False)
    a = citation_matrix(*np.nonzero(edges), n)
    a_t = sp.csr_matrix(a.T, dtype=np.float32)
    blocks = [link_count_rows(a, a_t, s, min(n, s + 16)) for s in range(0, n, 16)]
    counts = (sp.vstack([b[0] for b in blocks]).tocsr(), sp.vstack([b[1] for b in blocks]).tocsr())
    whole, parts = citation_signals(a), citation_signals(a, counts=counts)
    assert whole.score.nnz > 0 and counts[0].diagonal().sum() == 0 == counts[1].diagonal().sum()
    for got, want in ((parts.score, whole.score),):
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
    np.testing.assert_array_equal(parts.coupling_row_log, whole.coupling_row_log)
    assert (parts.n_coupling_pairs, parts.n_cocitation_pairs) == (whole.n_coupling_pairs, whole.n_cocitation_pairs)


def test_top_k_rows_and_unique_equal_numpy_s_own() -> None:
    """The packed-key sort keeps each row's k best by (-weight, col), ties in column order, exactly
    as the three-key lexsort; input it cannot pack (unsorted, float64) takes the lexsort."""
    from graft.edges import _top_k_rows, _unique

    rng = np.random.default_rng(0)
    n = 300
    keys = rng.integers(0, n * n, 20_000)
    np.testing.assert_array_equal(_unique(keys), np.unique(keys))
    assert len(_unique(keys[:0])) == 0
    pairs = _unique(keys)
    rows, cols = pairs // n, pairs % n
    w = rng.choice(np.array([0.0, -0.0, 0.25, 0.5, 0.5000001, 1.0], dtype=np.float32), len(rows))
    w[::3] = rng.random(len(w[::3])).astype(np.float32)
    for k in (1, 5, 50):
        want = np.lexsort((cols, -w, rows))
        r = rows[want]
        want = want[np.arange(len(r)) - np.searchsorted(r, r) < k]
        np.testing.assert_array_equal(_top_k_rows(rows, cols, w, k), want)
        shuffled = rng.permutation(len(rows))  # not sorted by (row, col): the lexsort
        got = _top_k_rows(rows[shuffled], cols[shuffled], w[shuffled], k)
        np.testing.assert_array_equal(shuffled[got], want)
        np.testing.assert_array_equal(_top_k_rows(rows, cols, w.astype(np.float64), k), want)


def test_candidates_are_coupled_papers_and_direct_links_only_when_asked() -> None:
    """Coupled papers are candidates beyond the facet prefilter; a direct citation link is one
    only with `direct` (the reference design leaves it to be found: it is the evaluation's gold)."""
    rng = np.random.default_rng(5)
    n = 50
    owner, vecs = random_items(rng, n)
    a = citation_matrix(np.array([0, 1]), np.array([40, 40]), n)  # 0 and 1 cite 40: coupled
    sig = citation_signals(a)
    items = group_items(owner, vecs, n)
    params = GraphParams(top_k=n, n_candidates=2)
    facet_cands = {r: set(row) for start, block in prefilter_blocks(items.pooled, items.pooled, 2)
                   for r, row in enumerate(block.tolist(), start=start)}
    assert 40 not in facet_cands[0] and 0 not in facet_cands[40]
    assert 1 not in facet_cands[0] and 0 not in facet_cands[1]
    g = facet_graph(items, sig.score, citation_links(a, sig.score), params)
    assert g[0, 1] > 0 and g[1, 0] > 0  # coupled: scored although no facet candidate
    assert g[0, 40] == 0 and g[40, 0] == 0  # a direct link alone makes no candidate
    assert np.all(np.diff(g.indptr) <= 2 + 1)
    direct = facet_graph(items, sig.score, citation_links(a, sig.score, direct=True), params)
    assert direct[0, 40] > 0 and direct[40, 0] > 0 and direct[0, 1] > 0
    assert np.all(np.diff(direct.indptr) <= 2 + 2)


def test_strongest_per_row_keeps_each_rows_largest_ties_by_column() -> None:
    rng = np.random.default_rng(2)
    m = sp.random(40, 60, density=0.3, random_state=3, format="csr", dtype=np.float32)
    m.data = np.round(m.data * 4) / 4 + 0.25  # ties
    for k in (1, 3, 10):
        got = strongest_per_row(m, k)
        for r in range(m.shape[0]):
            row = m[r]
            order = np.lexsort((row.indices, -row.data))[:k]
            assert sorted(got[r].indices.tolist()) == sorted(row.indices[order].tolist())
            np.testing.assert_array_equal(got[r].toarray(), m[r].toarray() * (got[r].toarray() != 0))
    assert (strongest_per_row(m, 0) != m).nnz == 0 and (strongest_per_row(m, 60) != m).nnz == 0
    assert strongest_per_row(sp.csr_matrix((3, 3), dtype=np.float32), 2).nnz == 0
    del rng


def test_linked_candidates_are_the_strongest_coupled_papers() -> None:
    """With `linked_candidates` M a paper's coupled or co-cited candidates are its M highest-scored
    ones: its edges come from them and its facet candidates only; M at least the most a paper has
    builds the uncapped graph; a paper outside the corpus is capped the same way."""
    rng = np.random.default_rng(8)
    n = 60
    owner, vecs = random_items(rng, n)
    citing = rng.integers(0, n, size=400)
    cited = rng.integers(0, 12, size=400)  # a few heavily cited papers couple many
    a = citation_matrix(citing, cited, n)
    sig = citation_signals(a)
    items = group_items(owner, vecs, n)
    full = facet_graph(items, sig.score, citation_links(a, sig.score), GraphParams(top_k=n, n_candidates=3,
                                                                                    linked_candidates=0))
    most = int(np.diff(citation_links(a, sig.score).indptr).max())
    assert most > 10
    same = facet_graph(items, sig.score, citation_links(a, sig.score, per_row=most),
                       GraphParams(top_k=n, n_candidates=3, linked_candidates=most))
    assert (same != full).nnz == 0
    cap = 4
    params = GraphParams(top_k=n, n_candidates=3, linked_candidates=cap)
    capped = facet_graph(items, sig.score, citation_links(a, sig.score, per_row=cap), params)
    facet_cands = {r: set(row) for start, block in prefilter_blocks(items.pooled, items.pooled, 3)
                   for r, row in enumerate(block.tolist(), start=start)}
    strongest = strongest_per_row(sig.score, cap)
    for r in range(n):
        allowed = facet_cands[r] | set(strongest[r].indices.tolist())
        assert set(capped[r].indices.tolist()) <= allowed
        for c in capped[r].indices:  # scored as in the uncapped graph
            assert capped[r, c] == pytest.approx(full[r, c])
    assert capped.nnz < full.nnz
    row = sp.csr_matrix(sig.score[0])
    query = group_items(np.zeros(2, dtype=np.int64), vecs[:2], 1)
    out = external_facet_row(query, items, row, params)
    _, cand = next(prefilter_blocks(query.pooled, items.pooled, 3, exclude_self=False))
    assert set(out.indices.tolist()) <= set(cand[0].tolist()) | set(strongest_per_row(row, cap).indices.tolist())
    assert set(external_facet_row(query, items, row, replace(params, linked_candidates=0)).indices.tolist()) \
        >= set(row.indices.tolist())


def test_text_coupling_fills_only_the_rows_of_papers_without_citation_links() -> None:
    """Link-less papers (no citation either way) take their m nearest papers by title + abstract,
    clipped cosine, as their citation score row; other rows stay empty; a paper is never its own neighbour."""
    rng = np.random.default_rng(3)
    n = 30
    a = citation_matrix(np.array([0, 1, 2]), np.array([5, 5, 0]), n)
    lonely = linkless_rows(a)
    assert set(lonely.tolist()) == set(range(n)) - {0, 1, 2, 5}
    vecs = rng.normal(size=(n, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    text = text_coupling(vecs, lonely, 4)
    assert text.shape == (n, n)
    filled = np.flatnonzero(np.diff(text.indptr) > 0)
    assert set(filled.tolist()) <= set(lonely.tolist()) and len(filled) >= len(lonely) - 2
    for r in filled:
        sims = vecs @ vecs[r]
        sims[r] = -np.inf
        want = [c for c in np.argsort(-sims, kind="stable")[:4] if sims[c] > 0]
        row = text[r]
        assert sorted(row.indices.tolist()) == sorted(want)
        np.testing.assert_allclose(row.toarray()[0, want], np.clip(sims[want], 0, 1), rtol=1e-5)
    assert text_coupling(vecs, lonely, 0).nnz == 0


def test_text_coupling_is_the_citation_half_and_candidates_of_link_less_rows() -> None:
    """A link-less paper's text neighbours become candidates and get beta * cosine in their edge
    weight; the rows of papers with citation links are the same with or without text coupling."""
    from graphbuild.build import facet_graphs

    rng = np.random.default_rng(11)
    n = 40
    owner, vecs = random_items(rng, n)
    a = citation_matrix(np.array([0, 1, 3]), np.array([2, 2, 1]), n)
    sig = citation_signals(a)
    papers = rng.normal(size=(n, 16)).astype(np.float32)
    papers /= np.linalg.norm(papers, axis=1, keepdims=True)
    text = text_coupling(papers, linkless_rows(a), 3)
    params = GraphParams(top_k=n, n_candidates=2)
    facet = np.array(["method"] * len(owner))
    plain = facet_graphs(owner, facet, vecs, a, sig, params)["method"]
    coupled = facet_graphs(owner, facet, vecs, a, sig, params, text=text)["method"]
    items = group_items(owner, vecs, n)
    for r in range(n):
        if text[r].nnz == 0:
            assert (plain[r] != coupled[r]).nnz == 0
            continue
        for c, t in zip(text[r].indices, text[r].data):
            sim = float(np.clip(score_pairs(items, np.array([r]), items, np.array([c]))[0], 0, 1))
            assert coupled[r, c] == pytest.approx(params.alpha * sim + params.beta * t, abs=1e-6)
        assert set(text[r].indices) - set(plain[r].indices)  # a neighbour that was no candidate before


def test_rows_are_scored_as_pairs_are() -> None:
    rng = np.random.default_rng(7)
    n = 45
    owner, vecs = random_items(rng, n, max_items=3)
    items = group_items(owner, vecs, n)
    rows = np.repeat(np.arange(n), n)
    cols = np.tile(np.arange(n), n)
    want = score_pairs(items, rows, items, cols)
    np.testing.assert_allclose(want, dense_similarity(owner, vecs, n).ravel(), atol=1e-5)
    for block in (1, 8, n):  # one row at a time, a few, all at once
        np.testing.assert_allclose(score_gathered(items, rows, cols, block_rows=block), want, atol=1e-6)
    some = rng.random(len(rows)) < 0.2  # a subset of the pairs, from a later row on, some rows without any
    some[: 3 * n] = False
    some[10 * n : 14 * n] = False
    np.testing.assert_allclose(score_gathered(items, rows[some], cols[some], block_rows=3), want[some], atol=1e-6)
    assert score_gathered(items, rows[:0], cols[:0]).shape == (0,)
    with pytest.raises(ValueError, match="sorted by row"):
        score_gathered(items, rows[::-1], cols[::-1])
    empty = int(np.setdiff1d(np.arange(n), owner)[0])  # the paper without items scores 0 both ways
    assert not score_gathered(items, np.array([empty, empty]), np.array([0, 1])).any()
    assert not score_gathered(items, np.array([0, 1]), np.array([empty, empty])).any()


def test_pair_similarity_ignores_padding() -> None:
    a = np.zeros((1, 3, 2), np.float32)
    b = np.zeros((1, 3, 2), np.float32)
    a[0, 0] = [1, 0]
    b[0, 0] = [1, 0]
    b[0, 1] = [0, 1]
    am = np.array([[True, False, False]])
    bm = np.array([[True, True, False]])
    # a->b best match 1.0; b->a: (1 + 0) / 2; mean = 0.75
    assert pair_similarity(a, am, b, bm)[0] == pytest.approx(0.75)
    assert pair_similarity(a, am, b, np.zeros_like(bm))[0] == 0


def test_prefilter_blocks_match_full_sort() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(31, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    blocks = list(prefilter_blocks(x, x, 5, block_rows=4))
    got = np.vstack([c for _, c in blocks])
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    want = np.argsort(-s, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("via_torch", [True, False])
def test_best_columns_orders_ties_by_column_whichever_selection(via_torch: bool, monkeypatch) -> None:
    """Scores with many exact ties (few distinct values), some running past the tie margin: the
    result is the stable full sort's, whether torch.topk or np.argpartition selected the rows' best."""
    import graft.similarity as sim

    monkeypatch.setattr(sim, "TORCH_TOPK_MIN", 0 if via_torch else 10**12)
    rng = np.random.default_rng(11)
    scores = rng.integers(0, 6, size=(50, 300)).astype(np.float32)  # ~50 columns share each value
    scores[3] = 1.0  # a row of one value: its tie runs past any margin
    scores[4, 7] = -np.inf
    for c in (1, 5, 40, 299, 300):
        want = np.argsort(-scores, axis=1, kind="stable")[:, :c]
        np.testing.assert_array_equal(best_columns(scores, c), want)
    assert best_columns(scores, 0).shape == (50, 0)


def test_external_row_matches_corpus_row_for_a_copy() -> None:
    rng = np.random.default_rng(7)
    n = 40
    owner, vecs = random_items(rng, n)
    items = group_items(owner, vecs, n)
    zero = sp.csr_matrix((n, n), dtype=np.float32)
    params = GraphParams(top_k=5, n_candidates=n)
    g = facet_graph(items, zero, zero, params)
    node = int(owner[0])
    copy = group_items(np.zeros((owner == node).sum(), dtype=np.int64), vecs[owner == node], 1)
    row = external_facet_row(copy, items, sp.csr_matrix((1, n), dtype=np.float32), params).toarray().ravel()
    # the copy finds the original first (similarity 1), then the original's own neighbours
    assert int(np.argmax(row)) == node
    assert row[node] == pytest.approx(0.75, abs=1e-5)
    want = g[node].toarray().ravel()
    row[node] = 0
    top4 = set(np.flatnonzero(row))
    assert top4 == set(np.argsort(-want)[:4])
