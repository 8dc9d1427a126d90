"""The facet-representation benchmark's pieces (`experiments.facet_levers`) on real sentence vectors."""

from __future__ import annotations

import numpy as np

from experiments.facet_levers import ranks, recall_at, score_variant, without_common


def test_generic_directions_are_taken_out_per_facet(encoder) -> None:
    texts = ["We achieve state-of-the-art results on three benchmarks.",
             "Our method outperforms strong baselines on standard benchmarks.",
             "Experiments show large gains over the state of the art.",
             "We study how transformers attend to syntax.",
             "The problem of parsing noisy user text is hard.",
             "Machine translation of low-resource languages remains difficult."]
    vecs = np.asarray(encoder.encode(texts), dtype=np.float32)
    facets = np.array(["result"] * 3 + ["problem"] * 3)
    out = without_common(vecs, facets, 1)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    for f in ("result", "problem"):
        x = vecs[facets == f] - vecs[facets == f].mean(axis=0)
        top = np.linalg.svd(x, full_matrices=False)[2][:1]
        assert np.abs(out[facets == f] @ top.T).max() < 1e-4  # the facet's main direction is gone
    # the three generic result sentences are less alike than before
    before = vecs[:3] @ vecs[:3].T
    after = out[:3] @ out[:3].T
    assert after[np.triu_indices(3, 1)].mean() < before[np.triu_indices(3, 1)].mean()


def test_recall_ranks_and_fusion_leave_the_query_out() -> None:
    papers = np.random.default_rng(0).normal(size=(30, 8)).astype(np.float32)
    papers[1] = papers[0] + 0.05 * papers[1]  # the query's one gold paper, its nearest
    papers /= np.linalg.norm(papers, axis=1, keepdims=True)
    rows, gold = {"q": 0}, {"q": {1}}
    assert recall_at(lambda r: papers @ papers[r], rows, gold, k=1) == 1.0  # paper 1, not the query itself
    assert ranks(np.array([0.9, 0.5, 0.7]), 0).tolist() == [3, 2, 1]
    per_facet = {"problem": {0: papers @ papers[0]}, "method": {0: -(papers @ papers[0])}}
    row = score_variant(per_facet, papers, rows, gold)
    assert row["problem"] == row["dense"] == row["RRF"] == 1.0 and row["method"] == 0.0  # ranked last of 29
