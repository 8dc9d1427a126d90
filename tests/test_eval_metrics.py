"""Evaluation metrics and TREC I/O against hand-computed values (no corpus needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from eval.metrics import FacetSimilarity, attribution_precision, mean_recall, non_obvious_share, recall_at
from eval.runner import score_run
from eval.trec import format_run, read_qrels, read_run, write_run
from graft.errors import GraftError, InputValidationError
from graft.facets import FACETS


def test_recall_by_hand() -> None:
    ranked = ["a", "b", "c", "d", "e"]
    assert recall_at(ranked, {"b", "e", "z"}, 2) == pytest.approx(1 / 3)
    assert recall_at(ranked, {"b", "e", "z"}, 5) == pytest.approx(2 / 3)
    assert recall_at(ranked, set(), 5) == 0.0
    run = {"q1": [("a", 3.0), ("b", 2.0)], "q2": [("x", 1.0)]}
    qrels = {"q1": {"a", "c"}, "q2": {"y"}, "q3": {"a"}}
    # q1: 1/2, q2: 0, q3 (missing from the run): 0 -> mean 1/6
    assert mean_recall(run, qrels, 20) == pytest.approx(1 / 6)
    assert mean_recall(run, qrels, 1, qids=["q1"]) == pytest.approx(0.5)


def test_attribution_precision_by_hand() -> None:
    credits = [("method", True), ("method", False), ("problem", True), ("method", True), ("result", False)]
    p = attribution_precision(credits)
    assert p["overall"] == pytest.approx(3 / 5)
    assert p["credited"] == 5 and p["supported"] == 3
    assert p["per_facet"]["method"]["precision"] == pytest.approx(2 / 3)
    assert p["per_facet"]["problem"]["precision"] == 1.0
    assert p["per_facet"]["result"]["precision"] == 0.0
    assert p["per_facet"]["contribution"]["precision"] is None
    assert attribution_precision([])["overall"] is None


def test_non_obvious_share_by_hand() -> None:
    run = {"q": [("a", 4.0), ("b", 3.0), ("c", 2.0), ("d", 1.0)]}
    qrels = {"q": {"a", "c", "d"}}
    obvious = {"q": {"a", "b"}}
    out = non_obvious_share(run, qrels, obvious, k=3)  # correct in top 3: a (obvious), c (not)
    assert out == {"share": 0.5, "correct": 2, "non_obvious": 1}
    assert non_obvious_share(run, {"q": {"zz"}}, obvious)["share"] is None


def test_facet_similarity_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    n, d = 7, 5
    owner, facet_of, vecs = [], [], []
    for p in range(n):
        for f in FACETS:
            for _ in range(int(rng.integers(1, 3)) if p != 2 or f != "result" else 0):  # paper 2: no result item
                v = rng.normal(size=d)
                owner.append(p)
                facet_of.append(f)
                vecs.append(v / np.linalg.norm(v))
    owner, facet_of, vecs = np.array(owner), np.array(facet_of), np.array(vecs, dtype=np.float32)
    query = {f: vecs[(owner == 0) & (facet_of == f)] for f in FACETS}
    sim = FacetSimilarity(owner, facet_of, vecs, n)
    got = sim.scores(query)
    for c in range(n):
        want = 0.0
        for f in FACETS:
            a, b = query[f], vecs[(owner == c) & (facet_of == f)]
            want += float((a @ b.T).max()) if len(a) and len(b) else 0.0
        assert got[c] == pytest.approx(want / len(FACETS), abs=1e-5)
    near = sim.nearest(query, m=3, exclude=[0])
    assert 0 not in near and len(near) == 3
    assert near == [int(i) for i in np.argsort(-np.where(np.arange(n) == 0, -np.inf, got), kind="stable")[:3]]


def test_ties_across_a_cutoff_as_the_tables_and_as_trec_eval_order_them(tmp_path, monkeypatch) -> None:
    """Three documents tie behind the first: the tables (docid ascending) put b second, trec_eval
    (docid descending) d, the relevant one: R@2 is 0 one way, 1 the other."""
    from typer.testing import CliRunner

    from cli.app import app

    path = write_run(tmp_path / "tied.trec", {"q1": [("a", 1.0), ("b", 0.5), ("c", 0.5), ("d", 0.5)]}, "sys")
    assert [d for d, _ in read_run(path)["q1"]] == ["a", "b", "c", "d"]
    assert [d for d, _ in read_run(path, ties="trec_eval")["q1"]] == ["a", "d", "c", "b"]
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d 1\n")
    assert score_run(path, qrels, ks=(2, 3, 4))["R@2"] == 0.0
    assert score_run(path, qrels, ks=(2, 3, 4), ties="trec_eval")["R@2"] == 1.0
    assert score_run(path, qrels, ks=(3,))["R@3"] == 0.0 and score_run(path, qrels, ks=(4,))["R@4"] == 1.0
    with pytest.raises(GraftError, match="ties 'random' is unknown; use one of docid, trec_eval"):
        score_run(path, qrels, ties="random")
    res = CliRunner().invoke(app, ["eval", "score", str(path), str(qrels), "--ties", "trec_eval", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["R@20"] == 1.0
    res = CliRunner().invoke(app, ["eval", "score", str(path), str(qrels), "--ties", "random"])
    assert res.exit_code == 2 and "ties 'random' is unknown" in res.output


def test_trec_round_trip_and_rescoring(tmp_path) -> None:
    run = {"q2": [("d2", 1.0), ("d1", 1.0), ("d3", 2.5)], "q1": [("x", 0.5)]}
    lines = format_run(run, "sys")
    # ties broken by docid, queries sorted, ranks from 1
    assert lines == ["q1 Q0 x 1 0.5 sys", "q2 Q0 d3 1 2.5 sys", "q2 Q0 d1 2 1 sys", "q2 Q0 d2 3 1 sys"]
    path = write_run(tmp_path / "r.trec", run, "sys")
    assert read_run(path) == {"q1": [("x", 0.5)], "q2": [("d3", 2.5), ("d1", 1.0), ("d2", 1.0)]}
    # scores that differ in the 7th decimal stay apart: the file ranks as the retriever did
    near = {"q": [("a", 0.1045760), ("b", 0.1045761), ("c", 1 / 61)]}
    assert [d for d, _ in read_run(write_run(tmp_path / "near.trec", near, "sys"))["q"]] == ["b", "a", "c"]
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 x 1\nq2 0 d2 1\nq2 0 d9 1\nq2 0 d1 0\nq3 0 x 1\n")
    assert read_qrels(qrels) == {"q1": {"x"}, "q2": {"d2", "d9"}, "q3": {"x"}}
    out = score_run(path, qrels)
    # q1: 1, q2: 1/2 (d2 of d2, d9), q3: 0
    assert out["queries"] == 3 and out["answered"] == 2
    assert out["R@20"] == pytest.approx(0.5)
    with pytest.raises(InputValidationError, match="line 1"):
        bad = tmp_path / "bad.trec"
        bad.write_text("q1 Q0 x one 0.5\n")
        read_run(bad)
    with pytest.raises(InputValidationError, match="tag"):
        format_run(run, "two words")
    nan = tmp_path / "nan.trec"
    nan.write_text("q1 Q0 x 1 0.5 t\nq1 Q0 y 2 nan t\n")
    with pytest.raises(InputValidationError, match="nan.trec line 2: score 'nan' is not a finite number"):
        read_run(nan)  # a nan score leaves the ranking undefined
    nan.write_text("q1 Q0 x 1 inf t\n")
    with pytest.raises(InputValidationError, match="line 1: score 'inf' is not a finite number"):
        read_run(nan)
    # qrels that judge nothing, or none of the run's queries, are refused instead of scoring 0
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(GraftError, match="no query has a relevant document"):
        score_run(path, empty)
    other = tmp_path / "other.txt"
    other.write_text("z1 0 x 1\n")
    with pytest.raises(GraftError, match="none of the 2 queries .* the qrels of another suite"):
        score_run(path, other)
    (tmp_path / "empty.trec").write_text("\n")
    with pytest.raises(GraftError, match="empty.trec holds no results"):
        score_run(tmp_path / "empty.trec", qrels)
    with pytest.raises(GraftError, match=f"{tmp_path} is a folder, not a qrels file"):
        score_run(path, tmp_path)


def test_run_files_refuse_what_would_misread_and_read_a_byte_order_mark(tmp_path) -> None:
    """A document twice in one query's run would fill two places of its ranking (so R@k would count
    fewer documents): writing and reading refuse it with the line. Ids with spaces would shift the
    fields. A UTF-8 byte-order mark is not part of the first qid; other encodings are refused."""
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 a 1\n")
    twice = tmp_path / "twice.trec"
    twice.write_text("q1 Q0 b 1 2.0 t\nq1 Q0 a 2 1.0 t\nq2 Q0 a 1 1.0 t\nq1 Q0 b 3 0.5 t\n")
    with pytest.raises(InputValidationError, match="line 4: document 'b' is listed again for query 'q1'.*line 1"):
        read_run(twice)
    with pytest.raises(InputValidationError, match="'b' is ranked twice for query q1"):
        format_run({"q1": [("b", 1.0), ("b", 0.5)]}, "t")
    for run, what in (({"my draft": [("a", 1.0)]}, "query id 'my draft'"),
                      ({"q1": [("paper one", 1.0)]}, "paper id 'paper one'"),
                      ({"q1": [("a\x0cb", 1.0)]}, "paper id 'a\\\\x0cb'")):
        with pytest.raises(InputValidationError, match=what):
            format_run(run, "t")
    bom = tmp_path / "bom.trec"
    bom.write_bytes(b"\xef\xbb\xbfq1 Q0 a 1 1.0 t\n")
    assert read_run(bom) == {"q1": [("a", 1.0)]}
    assert score_run(bom, qrels)["R@20"] == 1.0
    latin = tmp_path / "latin.trec"
    latin.write_bytes(b"q1 Q0 caf\xe9 1 1.0 t\n")
    with pytest.raises(InputValidationError, match="cannot read it as UTF-8"):
        read_run(latin)


def test_paired_bootstrap_interval_holds_zero_only_when_the_two_are_not_told_apart() -> None:
    """Per-query differences all +0.1: the interval is [0.1, 0.1]; a difference as often -1 as +1
    gives an interval around 0; a mismatched pair of arrays is refused."""
    from experiments.paired_bootstrap import paired_bootstrap

    a = np.linspace(0.2, 0.8, 50)
    r = paired_bootstrap(a + 0.1, a)
    assert r["difference"] == pytest.approx(0.1) and r["low"] == pytest.approx(0.1) and r["high"] == pytest.approx(0.1)
    assert (r["a_ahead"], r["b_ahead"], r["queries"]) == (50, 0, 50)
    noise = paired_bootstrap(np.tile([1.0, 0.0], 100), np.tile([0.0, 1.0], 100))
    assert noise["low"] < 0 < noise["high"] and noise["difference"] == 0
    with pytest.raises(ValueError):
        paired_bootstrap(a, a[:3])
