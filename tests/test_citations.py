from __future__ import annotations

import math
import random

import numpy as np
import pytest
import scipy.sparse as sp

from graft.citations import citation_matrix, citation_signals, coupling_row_log, external_citation_row


def brute_force(n: int, edges: set[tuple[int, int]]) -> list[list[float]]:
    """Pure-Python coupling + co-citation, log-compressed, rescaled per pair, averaged."""
    refs = {i: {j for (a, j) in edges if a == i} for i in range(n)}
    citers = {j: {a for (a, b) in edges if b == j} for j in range(n)}
    coupling = [[len(refs[i] & refs[j]) if i != j else 0 for j in range(n)] for i in range(n)]
    cocite = [[len(citers[i] & citers[j]) if i != j else 0 for j in range(n)] for i in range(n)]

    def rescale(m):
        row_log = [math.log1p(max(row)) for row in m]
        return [[math.log1p(m[i][j]) / math.sqrt(row_log[i] * row_log[j]) if m[i][j] else 0.0
                 for j in range(n)] for i in range(n)]

    c1, c2 = rescale(coupling), rescale(cocite)
    return [[0.5 * (c1[i][j] + c2[i][j]) for j in range(n)] for i in range(n)]


@pytest.mark.parametrize("seed", range(8))
def test_signals_match_brute_force_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    p = rng.choice([0.02, 0.1, 0.3])
    edges = {(i, j) for i in range(n) for j in range(n) if i != j and rng.random() < p}
    citing = np.array([e[0] for e in edges], dtype=np.int64)
    cited = np.array([e[1] for e in edges], dtype=np.int64)
    # duplicates and self-loops in the input must not change anything
    citing = np.concatenate([citing, citing[:3], [0]])
    cited = np.concatenate([cited, cited[:3], [0]])
    a = citation_matrix(citing, cited, n)
    got = citation_signals(a).score.toarray()
    want = np.array(brute_force(n, edges), dtype=np.float32)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.allclose(got, got.T)
    assert got.min() >= 0 and got.max() <= 1 + 1e-6
    assert np.all(np.diag(got) == 0)


def test_external_row_is_coupling_on_corpus_scale() -> None:
    # 0 -> {2, 3}, 1 -> {2, 3}, 4 -> {3}: coupling(0, 1) = 2, coupling(0, 4) = coupling(1, 4) = 1
    a = citation_matrix(np.array([0, 0, 1, 1, 4]), np.array([2, 3, 2, 3, 3]), 5)
    sig = citation_signals(a)
    row_log = coupling_row_log(a)
    np.testing.assert_allclose(row_log, sig.coupling_row_log)
    np.testing.assert_allclose(row_log, [math.log1p(2), math.log1p(2), 0, 0, math.log1p(1)])
    # a new paper citing {2, 3} couples like paper 0 does (co-citation half is zero)
    row = external_citation_row(a, np.array([2, 3]), row_log).toarray().ravel()
    np.testing.assert_allclose(row[[0, 1]], 0.5)
    np.testing.assert_allclose(row[4], 0.5 * math.log1p(1) / math.sqrt(math.log1p(2) * math.log1p(1)), rtol=1e-6)
    assert row[2] == 0 and row[3] == 0
    # paper 0's own score against 4 uses the same constants on the coupling half
    coupling_half = math.log1p(1) / math.sqrt(math.log1p(2) * math.log1p(1))
    assert sig.score[0, 4] == pytest.approx(0.5 * coupling_half)
    assert external_citation_row(a, np.array([], dtype=np.int64), row_log).nnz == 0


def test_global_rescale_divides_by_the_corpus_maximum() -> None:
    rng = random.Random(11)
    n = 30
    edges = {(i, j) for i in range(n) for j in range(n) if i != j and rng.random() < 0.15}
    a = citation_matrix(np.array([e[0] for e in edges]), np.array([e[1] for e in edges]), n)
    got = citation_signals(a, "global").score.toarray()
    counts_c = (a @ a.T).toarray()
    counts_o = (a.T @ a).toarray()
    np.fill_diagonal(counts_c, 0)
    np.fill_diagonal(counts_o, 0)
    want = 0.5 * (np.log1p(counts_c) / np.log1p(counts_c.max()) + np.log1p(counts_o) / np.log1p(counts_o.max()))
    np.testing.assert_allclose(got, want, atol=1e-6)
    # per-pair rescaling lifts typical pairs: the mean non-zero score is higher
    pair = citation_signals(a, "pair").score
    assert pair.data.mean() > citation_signals(a, "global").score.data.mean()
    with pytest.raises(ValueError, match="pair, global"):
        citation_signals(a, "row")


def test_capped_partners_keep_the_strongest_pairs_at_their_uncapped_scores() -> None:
    """With `partners` P each paper keeps its P most coupled and P most co-cited papers: a pair stays
    where either paper keeps it, at exactly its uncapped score (both its counts kept; the rescaling
    constants are the rows' largest counts, always kept); a dropped partner is coupled no more than
    the P-th most coupled one."""
    from graft.citations import count_blocks, link_counts

    rng = np.random.default_rng(4)
    n = 120
    hubs = rng.random((n, n)) < np.where(np.arange(n) < 6, 0.5, 0.03)[None, :]  # six heavily cited papers
    np.fill_diagonal(hubs, False)
    a = citation_matrix(*np.nonzero(hubs), n)
    whole = citation_signals(a)
    capped = citation_signals(a, partners=5)
    assert 0 < capped.score.nnz < whole.score.nnz
    assert (capped.score != capped.score.T).nnz == 0
    kept = capped.score.tocoo()
    np.testing.assert_array_equal(kept.data, np.asarray(whole.score[kept.row, kept.col]).ravel())
    np.testing.assert_array_equal(capped.coupling_row_log, whole.coupling_row_log)
    np.testing.assert_array_equal(capped.cocitation_row_log, whole.cocitation_row_log)
    counts = (a @ a.T).toarray()
    np.fill_diagonal(counts, 0)
    cc = link_counts(a, partners=5)[0].toarray()
    for i in range(n):  # at least the five most coupled; anything dropped no more coupled than the fifth
        mine = np.flatnonzero(cc[i])
        assert len(mine) >= min(5, np.count_nonzero(counts[i]))
        np.testing.assert_array_equal(cc[i][mine], counts[i][mine])
        if len(mine):
            fifth = np.sort(counts[i])[::-1][min(5, np.count_nonzero(counts[i])) - 1]
            assert counts[i][np.setdiff1d(np.arange(n), mine)].max(initial=0) <= fifth
    # counted in blocks of rows (a small budget: many blocks), the same as in one
    blocks = count_blocks(a, budget=200)
    assert len(blocks) > 3 and blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(b[0] == p[1] for p, b in zip(blocks, blocks[1:]))
    np.testing.assert_array_equal(coupling_row_log(a), whole.coupling_row_log)
    uncapped_blocks = link_counts(a)
    assert (uncapped_blocks[0] != sp.csr_matrix(counts, dtype=np.float32)).nnz == 0
    assert count_blocks(citation_matrix(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)) == []


def test_citation_churn_benchmark_smoke(tmp_path, capsys) -> None:
    """experiments/citation_churn.py on a small corpus: the newest papers taken out and added back
    change the citation score rows of the papers they cite (and of those coupled with them)."""
    import json

    from experiments.citation_churn import main

    rng = random.Random(5)
    records = [{"id": f"p{i:03d}", "title": f"T{i}", "abstract": "A.", "year": 2000 + i // 10,
                "references": sorted({f"p{rng.randrange(i):03d}" for _ in range(min(i, 4))})} for i in range(60)]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["--corpus", str(path), "--added", "5,20", "--partners", "0"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    changed = [float(r[3]) for r in rows]
    assert len(rows) == 2 and 0 < changed[0] <= changed[1] <= 1
